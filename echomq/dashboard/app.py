"""The dashboard's web app: Starlette, server-rendered Jinja2 pages, a few lines of JS.

Every page handler is a plain ``def``: Starlette runs it on its thread pool, so a slow
Valkey call never stalls the event loop. Actions are POST forms, each confirmed in
the browser and carrying the page's form secret, refused from another site's Origin;
``read_only`` hides them and refuses their routes (403). Remove, cancel and purge are
optional on wire 6 (SPEC §9.4): a node whose EMQ.VERSION does not list their token shows
no button for them and refuses their routes (501). Pinned queues (``Settings.queues``,
``emq dashboard -q``) scope it: any other queue's routes answer 404.

Job data is escaped twice over: HTML by Jinja, and every character that is not printable
by the ``one_line``/``lines`` filters (echomq._protocol.shown). A job is named in links and forms by
its id's escaped form (``id_form``), which carries any id, CR, LF and bytes that are not UTF-8
included, through HTML and a URL unchanged.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any, AsyncIterator, Callable
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..admin import actions
from ..admin.selection import BULK_BATCH, count_dead, dead_as_of, matching_page
from ..admin.steps import parse_duration_ms
from .._client.connection import Connection
from ..errors import ConfigurationError, ConnectionFailed, EchoMQError
from .._core.workers import WorkerRecord, serving
from ..admin.workers import list_workers, worker_summaries
from .._core.summaries import TaskSummary, TaskTimes, by_queue, over_workers
from ..admin.inventory import (GROUPED_SETS, QueueNumbers, QueueScan, ago, find_exact, find_prefixed, job_page,
                               job_story, numbers_of, numbers_or_error, queue_exists, scan_queues, waiting_unserved)
from .._protocol.keys import MAX_ID_BYTES, QUEUE_NAME, State, check_group, check_job_id
from ..observe.metrics import NodeCollector
from .._client.partitioned import AnyQueue, PartitionedQueue, open_queue, open_queues
from .._client.queue import Queue
from .._protocol.serializers import RAW
from .._protocol.shown import from_id_form, id_form, lines, one_line
from .._protocol.verbs import BY_NAME
from .auth import LOOPBACK_HOSTS, SecurityHeaders, TokenRequired, check_token, same_origin
from .rates import Sampler, rate_series, svg_chart
from .views import PAGE_SIZE, BadQuery, ListQuery, list_query, number, read_filter, search_text, seconds

GROUPS_SHOWN = 100  #: a queue page lists at most this many lane groups (the first by name)
PURGE_BATCH = 1000  #: dead jobs deleted per PURGE call
SEARCH_HITS = 20  #: the most jobs a search by an id's start lists
DISCOVERY_TTL_S = 10.0  #: how long a SCAN's list of queues is reused (a SCAN walks the whole keyspace)
SUMMARIES_TTL_S = 5.0  #: how long the workers' summaries are reused (each worker rewrites its own once a beat)
HERE = files(__package__)
#: every action, done or refused, one line each: who (the client's address), what, on which queue, what it did
audit = logging.getLogger("echomq.dashboard.audit")
#: the verbs a wire-6 node may not serve (SPEC §9.4): their buttons and routes need its token
OPTIONAL_VERBS = ("remove", "cancel", "purge")


@dataclass
class Settings:
    read_only: bool = False
    token: str | None = None
    queues: list[str] = field(default_factory=list)  #: pinned queues (no SCAN); empty = discover
    sample_interval_s: float = 2.0
    refresh_s: float = 2.0  #: how often open pages reload their live parts
    #: how often a filtered job list reloads at most (each reload reads up to selection.SCAN_BUDGET rows)
    filtered_refresh_s: float = 10.0


class QueueList:
    """The queues to show: the pinned ones, or a SCAN's answer reused for ``DISCOVERY_TTL_S``."""

    def __init__(self, connection: Connection, pinned: list[str]) -> None:
        self.connection, self.pinned = connection, pinned
        self._found = QueueScan(list(pinned))
        self._at = float("-inf")
        self._summaries: dict[str, list[TaskSummary]] = {}
        self._summaries_at = float("-inf")
        self._lock = threading.Lock()

    def __call__(self) -> list[str]:
        return self.scan().names

    def scan(self) -> QueueScan:
        """The pinned queues, or the last SCAN's queues and the keys it skipped."""
        if self.pinned:
            return self._found
        with self._lock:
            if time.monotonic() - self._at > DISCOVERY_TTL_S:
                self._found, self._at = scan_queues(self.connection), time.monotonic()
            return self._found

    def shows(self, name: str) -> bool:
        """Pinned queues scope every route: another queue's answer 404 (no pins: every queue)."""
        return not self.pinned or name in self.pinned

    def workers(self) -> list[WorkerRecord]:
        """The live workers; with pinned queues, those that serve one of them."""
        found = list_workers(self.connection)
        return found if not self.pinned else [w for w in found if set(w.queues) & set(self.pinned)]

    def forget(self) -> None:
        with self._lock:
            self._at = float("-inf")

    def summaries(self, workers: list[WorkerRecord]) -> dict[str, list[TaskSummary]]:
        """What ``workers`` published of their jobs (the shown queues' tasks), read at most every
        SUMMARIES_TTL_S (a worker rewrites it once a beat)."""
        with self._lock:
            if time.monotonic() - self._summaries_at > SUMMARIES_TTL_S:
                self._summaries, self._summaries_at = worker_summaries(self.connection, workers), time.monotonic()
            found = self._summaries
        live = {w.id for w in workers}
        return {worker: [t for t in tasks if self.shows(t.queue)] for worker, tasks in found.items() if worker in live}

    def times(self) -> list[TaskTimes]:
        """Each shown queue's tasks over the live workers' last minutes."""
        return over_workers(self.summaries(self.workers()).values())


def create_app(connection: Connection, settings: Settings | None = None) -> Starlette:
    """The dashboard for the node behind ``connection`` (the caller owns and closes it)."""
    settings = settings or Settings()
    check_token(settings.token)
    queue_names = QueueList(connection, settings.queues)
    form_secret = secrets.token_urlsafe(24)
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(["html"]))
    env.globals.update(read_only=settings.read_only, form_secret=form_secret, refresh_s=settings.refresh_s,
                       filtered_refresh_s=settings.filtered_refresh_s,
                       wire=connection.wire, states=[s.value for s in State], serves=connection.supports)
    env.filters.update(ago=ago, id_form=id_form, one_line=lambda value: one_line(str(value)), lines=lines,
                       seconds=seconds)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(connection, queue_names.scan, queue_names.workers, queue_names.summaries))

    def all_numbers(oldest: bool = False) -> list[tuple[str, QueueNumbers | Exception]]:
        names = queue_names()
        return list(zip(names, numbers_of(open_queues(connection, names), oldest=oldest)))

    sampler = Sampler(lambda: [n for _, n in all_numbers() if isinstance(n, QueueNumbers)], settings.sample_interval_s)

    def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(**context), status_code=status)

    def known_queue(request: Request) -> AnyQueue:
        name = request.path_params["name"]
        if not QUEUE_NAME.fullmatch(name):
            raise _Problem(400, f"bad queue name {name!r}")
        if not queue_names.shows(name):
            raise _Problem(404, f"no queue {name!r} on this dashboard (it shows {', '.join(settings.queues)})")
        queue = open_queue(connection, name, serializer=RAW)
        if not queue_exists(queue):
            raise _Problem(404, f"no queue {name!r} on this node")
        return queue

    def overview_context() -> dict[str, Any]:
        samples = sampler.snapshot()
        workers = queue_names.workers()
        served = serving(workers)
        rows = []
        for name, numbers in all_numbers(oldest=True):
            series = rate_series(samples, name)
            rows.append({"name": name, "numbers": numbers, "rate": series[-1] if series else None,
                         "unserved": isinstance(numbers, QueueNumbers) and waiting_unserved(numbers, served[name])})
        # a queue with lane or flow jobs: their columns, for every queue (as emq stats)
        grouped = any(isinstance(row["numbers"], QueueNumbers) and row["numbers"].counts.grouped for row in rows)
        times = by_queue(over_workers(queue_names.summaries(workers).values()))
        return {"rows": rows, "grouped": grouped, "chart": svg_chart(rate_series(samples)), "workers": workers,
                "skipped": queue_names.scan(), "now": time.time(),
                "times": [times[row["name"]] for row in rows if row["name"] in times]}

    # -- pages (sync: run on the thread pool) --------------------------------------------------
    def overview(request: Request) -> Response:
        return render("overview.html", **overview_context())

    def overview_part(request: Request) -> Response:
        return render("_overview.html", **overview_context())

    def listable(queue: AnyQueue) -> list[str]:
        return [s.value for s in State] + ([] if isinstance(queue, PartitionedQueue) else list(GROUPED_SETS))

    def read_list(request: Request, queue: AnyQueue) -> ListQuery:
        try:
            return list_query(request.query_params, listable(queue))
        except BadQuery as exc:
            raise _Problem(400, str(exc)) from None

    def read_numbers(queue: AnyQueue) -> QueueNumbers:
        numbers = numbers_or_error(queue, oldest=True)
        if isinstance(numbers, Exception):
            raise _Problem(500, f"queue {queue.name!r} is unreadable: {numbers}")
        return numbers

    def queue_read(request: Request) -> tuple[AnyQueue, ListQuery, QueueNumbers]:
        queue = known_queue(request)
        return queue, read_list(request, queue), read_numbers(queue)

    def queue_context(request: Request, queue: AnyQueue, shown: ListQuery, numbers: QueueNumbers) -> dict[str, Any]:
        """The queue page's live numbers: counts, groups, chart."""
        # a queue with lane jobs lists its groups (a partitioned queue has none)
        groups_total, groups = (queue.group_page(GROUPS_SHOWN) if numbers.counts.lane_pending + numbers.counts.lane_active
                                and not isinstance(queue, PartitionedQueue) else (0, {}))
        return {"queue": queue.name, "numbers": numbers, "state": shown.state, "shown": shown, "groups": groups,
                "groups_total": groups_total, "chart": svg_chart(rate_series(sampler.snapshot(), queue.name)),
                "message": request.query_params.get("done"),
                "times": [t for t in queue_names.times() if t.queue == queue.name]}

    def jobs_context(queue: AnyQueue, shown: ListQuery, numbers: QueueNumbers) -> dict[str, Any]:
        """The queue page's job list: a page of a state's jobs, or, filtered, those a bounded scan found."""
        total = getattr(numbers.counts, shown.state)
        found = {"total": total, "base": f"/queues/{queue.name}"}
        if not shown.job_filter.empty:
            if shown.start and shown.start >= total:
                raise _Problem(400, f"bad from {shown.start}: {shown.state} has {total} job(s) now")
            scan = matching_page(queue, shown.state, shown.job_filter, start=shown.start, count=PAGE_SIZE)
            return {**found, "jobs": scan.jobs, "scan": scan, "pages": 1, "page": 1}
        pages = max(1, -(-total // PAGE_SIZE))
        if shown.page > pages:
            raise _Problem(400, f"bad page {shown.page}: {shown.state} has {pages} page(s) of {PAGE_SIZE} now")
        jobs = job_page(queue, shown.state, offset=(shown.page - 1) * PAGE_SIZE, count=PAGE_SIZE)
        return {**found, "jobs": jobs, "scan": None, "pages": pages, "page": shown.page}

    def queue_page(request: Request) -> Response:
        queue, shown, numbers = queue_read(request)
        return render("queue.html", **queue_context(request, queue, shown, numbers),
                      **jobs_context(queue, shown, numbers))

    def queue_part(request: Request) -> Response:
        return render("_queue.html", **queue_context(request, *queue_read(request)))

    def jobs_part(request: Request) -> Response:
        queue, shown, numbers = queue_read(request)
        return render("_jobs.html", queue=queue.name, state=shown.state, shown=shown,
                      **jobs_context(queue, shown, numbers))

    def search(request: Request) -> Response:
        """A job by its id in any queue shown (one round trip): its page when one queue holds it;
        else the jobs whose id starts so (a SCAN, ended at SEARCH_HITS)."""
        try:
            text = search_text(request.query_params)
        except BadQuery as exc:
            raise _Problem(400, str(exc)) from None
        if not text:
            return render("search.html", text="", exact=[], prefixed=[], complete=True, search_shown="")
        try:
            job_id = from_id_form(text)
        except ValueError as exc:
            raise _Problem(400, f"bad job id {text[:40]!r}: {exc}") from None
        exact = find_exact(open_queues(connection, queue_names(), serializer=RAW), job_id) \
            if len(job_id.encode(errors="surrogateescape")) <= MAX_ID_BYTES else []
        prefixed, complete = ([], True) if exact else find_prefixed(connection, job_id, queue_names.shows, SEARCH_HITS)
        # a queue made since the last discovery is found by the SCAN: its job by the whole id too
        exact = exact or [hit for hit in prefixed if hit.id == job_id]
        if len(exact) == 1:
            return RedirectResponse(f"/queues/{exact[0].queue}/job?{urlencode({'id': id_form(job_id)})}",
                                    status_code=303)
        return render("search.html", text=text, exact=exact, prefixed=prefixed, complete=complete, search_shown=text)

    def bulk_context(request: Request, action: str, form: dict[str, str] | None = None) -> dict[str, Any]:
        queue = known_queue(request)
        params = form if form is not None else dict(request.query_params)
        try:
            job_filter = read_filter(params)
        except BadQuery as exc:
            raise _Problem(400, str(exc)) from None
        return {"queue": queue, "action": action, "job_filter": job_filter}

    def bulk_confirm(action: str) -> Callable[[Request], Response]:
        def confirm(request: Request) -> Response:
            """A bulk action's confirmation: how many dead jobs it would act on, counted now."""
            if settings.read_only:
                raise _Problem(403, "this dashboard is read-only")
            refuse_unserved(action)
            found = bulk_context(request, action)
            queue = found["queue"]
            as_of = dead_as_of(queue)
            count = count_dead(queue, found["job_filter"], as_of)
            return render("bulk.html", **found, queue_name=queue.name, as_of=as_of, count=count, batch=BULK_BATCH,
                          back=ListQuery("dead", job_filter=found["job_filter"]).href(f"/queues/{queue.name}"))
        confirm.__name__ = f"confirm_{action}"
        return confirm

    def refuse_unserved(verb: str) -> None:
        if verb in OPTIONAL_VERBS and not connection.supports(verb):
            raise _Problem(501, f"this node does not serve {verb}: its trafikey's EMQ.VERSION lists no "
                                f"{' '.join(BY_NAME[verb].tokens)!r} token; upgrade the module")

    def job_page_view(request: Request) -> Response:
        queue = known_queue(request)
        job_id = _job_id(request.query_params.get("id", ""))
        view = job_story(queue, job_id)  # a completed job: its record and result
        if view is None:
            raise _Problem(404, f"no job {id_form(job_id)!r} in {queue.name!r} (a completed job is kept only for its "
                                "task's result_ttl)")
        return render("job.html", queue=queue.name, job=view, message=request.query_params.get("done"))

    def workers_context() -> dict[str, Any]:
        return {"workers": queue_names.workers(), "now": time.time(), "detailed": True}

    def workers_page(request: Request) -> Response:
        return render("workers.html", **workers_context())

    def workers_part(request: Request) -> Response:
        return render("_workers.html", **workers_context())

    def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # -- actions (async: the form is read on the loop, the valkey call on the pool) -------------
    def action(do: Callable[[AnyQueue, dict[str, str]], tuple[str, str]], verb: str | None = None
               ) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            name = request.path_params.get("name", "")

            def refused(status: int, message: str) -> HTMLResponse:
                audit.warning("%s %s %s: refused %d: %s", client_of(request), do.__name__, one_line(name), status,
                              one_line(message))
                return _problem_page(render, status, message)

            if settings.read_only:
                return refused(403, "this dashboard is read-only")
            if not same_origin(request.headers.get("origin"), request.headers.get("host")):
                return refused(403, f"refused: posted from another site (Origin {one_line(request.headers['origin'])!r})")
            form = {k: v[0] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
            if not secrets.compare_digest(form.get("secret", ""), form_secret):
                return refused(403, "the form is stale or from another site: reload the page")
            started = time.monotonic()
            try:
                if verb is not None:
                    refuse_unserved(verb)
                queue = await run_in_threadpool(known_queue, request)
                target, message = await run_in_threadpool(do, queue, form)
            except _Problem as problem:
                return refused(problem.status, problem.message)
            except EchoMQError as exc:
                return refused(409, str(exc))
            audit.info("%s %s %s: %s (%.2f s)", client_of(request), do.__name__, one_line(name), one_line(message),
                       time.monotonic() - started)
            queue_names.forget()
            return RedirectResponse(f"{target}{'&' if '?' in target else '?'}{urlencode({'done': message})}",
                                    status_code=303)
        return endpoint

    def bulk(action_name: str) -> Callable[[AnyQueue, dict[str, str]], tuple[str, str]]:
        def do(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
            """The dead jobs the confirmation counted (those dead as of its ``as_of``) that the filter
            matches, acted on in batches."""
            try:
                job_filter = read_filter(form)
                as_of = number(form.get("as_of", ""), "as_of", 0)
            except BadQuery as exc:
                raise _Problem(400, str(exc)) from None
            done = actions.act_on_dead(queue, action_name, job_filter, as_of)
            said = f"{'reprocessed' if action_name == 'reprocess' else 'removed'} {len(done.done)} of {done.chosen} " \
                   f"dead job(s) matching {job_filter.described()}"
            if done.not_done:
                said += f"; {len(done.not_done)} not: moved meanwhile, or refused"
            return ListQuery("dead", job_filter=job_filter).href(f"/queues/{queue.name}"), said
        do.__name__ = f"{action_name}_all"
        return do

    def pause(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        queue.pause()
        return f"/queues/{queue.name}", f"{queue.name} paused"

    def resume(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        queue.resume()
        return f"/queues/{queue.name}", f"{queue.name} resumed"

    def promote(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        moved = queue.promote()
        return f"/queues/{queue.name}?state=scheduled", f"promoted {moved} due job(s)"

    def reprocess(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        job_id = _job_id(form.get("id", ""))
        moved = queue.reprocess(job_id)
        if not moved:
            raise _Problem(409, f"job {id_form(job_id)!r} is not in dead: nothing reprocessed")
        return job_address(queue, job_id), f"{id_form(job_id)} reprocessed: back to pending"

    def group_of(queue: AnyQueue, form: dict[str, str]) -> tuple[Queue, str]:
        if isinstance(queue, PartitionedQueue):
            raise _Problem(400, f"{queue.name!r} is a partitioned queue: it has no lane groups")
        try:
            return queue, check_group(form.get("group", ""))
        except ConfigurationError as exc:
            raise _Problem(400, str(exc)) from None

    def pause_group(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        lanes, group = group_of(queue, form)
        lanes.pause_group(group)
        return f"/queues/{queue.name}", f"group {group} paused: it starts no job until resumed"

    def resume_group(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        lanes, group = group_of(queue, form)
        was = lanes.resume_group(group)
        return f"/queues/{queue.name}", f"group {group} resumed" + ("" if was else " (it was not paused)")

    def job_address(queue: AnyQueue, job_id: str) -> str:
        return f"/queues/{queue.name}/job?{urlencode({'id': id_form(job_id)})}"

    def remove(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        job_id = _job_id(form.get("id", ""))
        was = queue.remove(job_id)
        if was is None:
            raise _Problem(404, f"no job {id_form(job_id)!r} in {queue.name!r}: nothing removed")
        return f"/queues/{queue.name}?state={was.value}", f"{id_form(job_id)} removed from {was.value}"

    def cancel(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        job_id = _job_id(form.get("id", ""))
        if not queue.cancel(job_id):
            raise _Problem(404, f"no job {id_form(job_id)!r} in {queue.name!r}: nothing cancelled")
        return job_address(queue, job_id), f"{id_form(job_id)} cancelled: dead, its holder's settle will be refused"

    def purge(queue: AnyQueue, form: dict[str, str]) -> tuple[str, str]:
        older_than = form.get("older_than", "").strip()
        try:
            age_ms = parse_duration_ms(older_than) if older_than else 0
        except ValueError as exc:
            raise _Problem(400, str(exc)) from None
        purged = actions.purge(queue, age_ms, PURGE_BATCH)
        return f"/queues/{queue.name}?state=dead", \
            f"purged {purged} dead job(s){f' dead at least {older_than}' if older_than else ''}"

    def client_of(request: Request) -> str:
        return (request.client.host if request.client else "?")

    def with_problems(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def wrapped(request: Request) -> Response:
            try:
                return handler(request)
            except _Problem as problem:
                return _problem_page(render, problem.status, problem.message)
        wrapped.__name__ = handler.__name__
        return wrapped

    routes = [
        Route("/", with_problems(overview)),
        Route("/parts/overview", with_problems(overview_part)),
        Route("/workers", with_problems(workers_page)),
        Route("/parts/workers", with_problems(workers_part)),
        Route("/metrics", metrics),
        Route("/search", with_problems(search)),
        Route("/queues/{name}", with_problems(queue_page)),
        Route("/parts/queues/{name}", with_problems(queue_part)),
        Route("/parts/queues/{name}/jobs", with_problems(jobs_part)),
        Route("/queues/{name}/job", with_problems(job_page_view)),
        Route("/queues/{name}/pause", action(pause), methods=["POST"]),
        Route("/queues/{name}/resume", action(resume), methods=["POST"]),
        Route("/queues/{name}/promote", action(promote), methods=["POST"]),
        Route("/queues/{name}/groups/pause", action(pause_group), methods=["POST"]),
        Route("/queues/{name}/groups/resume", action(resume_group), methods=["POST"]),
        Route("/queues/{name}/reprocess", action(reprocess), methods=["POST"]),
        Route("/queues/{name}/remove", action(remove, "remove"), methods=["POST"]),
        Route("/queues/{name}/cancel", action(cancel, "cancel"), methods=["POST"]),
        Route("/queues/{name}/purge", action(purge, "purge"), methods=["POST"]),
        Route("/queues/{name}/bulk/reprocess", with_problems(bulk_confirm("reprocess"))),
        Route("/queues/{name}/bulk/reprocess", action(bulk("reprocess")), methods=["POST"]),
        Route("/queues/{name}/bulk/remove", with_problems(bulk_confirm("remove"))),
        Route("/queues/{name}/bulk/remove", action(bulk("remove"), "remove"), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            sampler.stop()

    def node_down(request: Request, exc: Exception) -> Response:
        return _problem_page(render, 503, f"the node does not answer ({exc}); this page works again when it does")

    def refused(request: Request, exc: Exception) -> Response:
        return _problem_page(render, 500, f"the node refused a read: {exc}")

    handlers = {ConnectionFailed: node_down, EchoMQError: refused}  # every read's link fault is ConnectionFailed
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)  # type: ignore[arg-type]
    if settings.token:
        app.add_middleware(TokenRequired, token=settings.token)
    else:
        # without a token it may only be served on loopback (check_binding), and only loopback names may
        # address it: a page on another site cannot reach it through a DNS name rebound to 127.0.0.1
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK_HOSTS))
    app.add_middleware(SecurityHeaders)  # the outermost: a 401 or a refused Host gets them too
    return app


class _Problem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _problem_page(render: Callable[..., HTMLResponse], status: int, message: str) -> HTMLResponse:
    return render("problem.html", status=status, message=message)


def _job_id(given: str) -> str:
    """A job named by a link or a form: its id's escaped form (echomq._protocol.shown.id_form) read back."""
    try:
        return check_job_id(from_id_form(given))
    except (ValueError, ConfigurationError) as exc:  # ConfigurationError: a bad id's own message
        raise _Problem(400, f"bad job id {given[:40]!r}: {exc}") from None
