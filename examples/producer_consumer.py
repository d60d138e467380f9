"""A two-module workflow: a producer sends work to consumer copies with ctx.send/recv.

Run it with::

    mpiexec -n 3 diel run examples/producer_consumer.yaml

The producer (one rank) sends each consumer copy a list of numbers every iteration;
each consumer squares them and sends the sum back. Modules are addressed by name and
copy, never by world rank, so the layout can change without touching this code.
"""

from __future__ import annotations


def produce(ctx) -> None:
    """Send each consumer copy a slice of numbers, then collect and print their sums."""
    consumers = ctx.module_copies("consumer")
    count = int(ctx.config.get("numbers", 10))
    numbers = list(range(ctx.iteration * count, (ctx.iteration + 1) * count))
    for copy in range(consumers):
        ctx.send("consumer", numbers[copy::consumers], copy=copy)
    total = sum(ctx.recv("consumer", copy=copy) for copy in range(consumers))
    expected = sum(n * n for n in numbers)
    ctx.log.info("iteration %d: sum of squares %d (expected %d)", ctx.iteration, total, expected)
    if total != expected:
        raise RuntimeError(f"consumers returned {total}, expected {expected}")


def consume(ctx) -> None:
    """Square the numbers the producer sent and send the sum back."""
    numbers = ctx.recv("producer")
    ctx.send("producer", sum(n * n for n in numbers))
