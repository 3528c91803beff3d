"""mas_core.events.groups_send: channels_redis's group_send for several groups in at most two round trips."""

from __future__ import annotations

import asyncio

from channels.layers import get_channel_layer

from mas_core.events import groups_send


def test_each_member_gets_its_groups_message_and_a_group_without_members_costs_nothing():
    async def main():
        layer = get_channel_layer()
        first, second = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("gs.run", first)
        await layer.group_add("gs.run", second)
        await layer.group_add("gs.team", second)
        try:
            await groups_send(layer, [("gs.run", {"type": "run.events", "n": 1}),
                                      ("gs.team", {"type": "runs.changed", "n": 2}),
                                      ("gs.nobody", {"type": "x", "n": 3})])
            got_first = await asyncio.wait_for(layer.receive(first), 5)
            got_second = sorted([await asyncio.wait_for(layer.receive(second), 5) for _ in range(2)],
                                key=lambda m: m["n"])
            await groups_send(layer, [("gs.nobody", {"type": "x", "n": 4})])  # one pipeline, nothing sent
        finally:
            for group, channel in (("gs.run", first), ("gs.run", second), ("gs.team", second)):
                await layer.group_discard(group, channel)
        return got_first, got_second

    got_first, got_second = asyncio.run(main())
    assert got_first == {"type": "run.events", "n": 1}
    assert got_second == [{"type": "run.events", "n": 1}, {"type": "runs.changed", "n": 2}]
