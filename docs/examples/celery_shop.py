"""docs/migrating.md's headline: a small Celery app ported to EchoMQ (the suite runs it).

Four lines differ from the Celery original shown beside it in docs/migrating.md: the import, the
app (its node and its one queue), a retry policy (``autoretry_for=..., max_retries=3``: EchoMQ
retries whatever a handler raises, 4 attempts in all) and ``apply_async()``, which is ``enqueue()``.
The workers run ``emq worker celery_shop:app`` where Celery ran ``celery -A celery_shop worker``.
"""
# shop.py, with EchoMQ
from echomq import App, chain, group

app = App("shop", url="redis://localhost:6379/0", queue="shop")

PRICES = {"apple": 3, "pear": 5, "fig": 7}


@app.task
def price(item, qty):
    return {"item": item, "total": PRICES[item] * qty}


@app.task
def invoice(lines, customer):
    return {"customer": customer, "total": sum(line["total"] for line in lines)}


@app.task(max_attempts=4)
def send_receipt(bill):
    return f"sent {bill['total']} to {bill['customer']}"


def checkout(customer, cart):
    flow = chain(group(price.s(item, qty) for item, qty in cart.items()), invoice.s(customer), send_receipt.s())
    return flow.enqueue()
