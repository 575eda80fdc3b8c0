// BullMQ on Node, driven as bench/peers/drive.py drives the Python peers:
//   node bullmq_node.mjs worker  URL QUEUE
//   node bullmq_node.mjs enqueue URL QUEUE N [PRIORITY]   (prints JSON {start, end}, epoch seconds;
//                                                      PRIORITY > 0: prioritized jobs, kept in a zset)
//   node bullmq_node.mjs stamped URL QUEUE M LO_MS HI_MS   (gaps as drive.py's gaps())
// BENCH_CONCURRENCY sets the Worker's concurrency (BullMQ's default is 1).
// The no-op processor counts itself as probe.py does: a process-local counter that a
// timer adds to bench:done every 2 ms (and latencies to bench:lat), never a round trip per job.
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const [what, url, queue, a, b, c] = process.argv.slice(2);
const connection = () => new IORedis(url, { maxRetriesPerRequest: null });
const now = () => Date.now() / 1000;

if (what === "worker") {
  const probe = connection();
  let count = 0;
  let lat = [];
  setInterval(async () => {
    if (!count && !lat.length) return;
    const c = count, l = lat;
    count = 0; lat = [];
    const pipe = probe.pipeline();
    if (l.length) pipe.rpush("bench:lat", ...l);
    if (c) pipe.incrbyfloat("bench:done", c);
    await pipe.exec();
  }, 2);
  const worker = new Worker(queue, async (job) => {
    if (job.data && job.data.t !== undefined) lat.push(((Date.now() / 1000 - job.data.t) * 1000).toFixed(3));
    count += 1;
  }, { connection: connection(), concurrency: Number(process.env.BENCH_CONCURRENCY || 1) });
  const stop = async () => { await worker.close(); process.exit(0); };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
} else if (what === "enqueue" || what === "stamped") {
  const q = new Queue(queue, { connection: connection() });
  await q.waitUntilReady();
  const t = { start: now() };
  if (what === "enqueue") {
    const n = Number(a);
    const opts = b ? { priority: Number(b) } : undefined;
    for (let start = 0; start < n; start += 1000) {
      const jobs = [];
      for (let i = 0; i < Math.min(1000, n - start); i++) jobs.push({ name: "noop", data: {}, opts });
      await q.addBulk(jobs);
    }
  } else {
    const m = Number(a), lo = Number(b), hi = Number(c);
    for (let i = 0; i < m; i++) {
      await new Promise((r) => setTimeout(r, lo + (hi - lo) * ((i * 0.6180339887) % 1.0)));
      await q.add("noop", { t: now() });
    }
  }
  t.end = now();
  await q.close();
  console.log(JSON.stringify(t));
  process.exit(0);
} else {
  console.error("usage: bullmq_node.mjs worker|enqueue|stamped URL QUEUE [N [PRIORITY] | M LO_MS HI_MS]");
  process.exit(2);
}
