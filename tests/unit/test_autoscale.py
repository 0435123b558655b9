from driver_review.autoscale import AutoscalePolicy, PoolSample, spread_target


def sample(now: float, backlog: int, workers: int, in_flight: int, waiting: int = 0) -> PoolSample:
    return PoolSample(backlog, workers, in_flight, workers * 10, waiting, now)


def test_grows_under_sustained_pressure_up_to_max() -> None:
    p = AutoscalePolicy(min_workers=1, max_workers=3, idle_shrink_s=10, sustain_ticks=2)
    workers, steps = 1, []
    for t in range(12):
        step = p.decide(sample(t, backlog=1000, workers=workers, in_flight=workers * 10))
        workers += step
        steps.append(step)
    assert workers == 3
    assert steps[0] == 0  # one busy tick alone is not a trend


def test_does_not_grow_when_held_by_rate_governor() -> None:
    p = AutoscalePolicy(min_workers=1, max_workers=4, idle_shrink_s=10, sustain_ticks=1)
    for t in range(10):
        assert p.decide(sample(t, backlog=1000, workers=1, in_flight=10, waiting=8)) == 0
    assert p.last_reason == "held by the rate governor"


def test_shrinks_to_min_after_idle_period_one_step_at_a_time() -> None:
    p = AutoscalePolicy(min_workers=1, max_workers=4, idle_shrink_s=5, sustain_ticks=1)
    workers = 4
    for t in range(0, 40):
        workers += p.decide(sample(t, backlog=0, workers=workers, in_flight=0))
        assert workers >= 1
    assert workers == 1


def test_busy_moment_resets_idle_timer() -> None:
    p = AutoscalePolicy(min_workers=1, max_workers=4, idle_shrink_s=5, sustain_ticks=99)
    assert p.decide(sample(0, 0, 2, 0)) == 0
    assert p.decide(sample(4, 5, 2, 15)) == 0
    assert p.decide(sample(8, 0, 2, 0)) == 0  # idle again only since t=8
    assert p.decide(sample(13, 0, 2, 0)) == -1


def test_does_not_grow_while_a_check_endpoint_caps_demand_but_grows_after() -> None:
    # Workers full and a deep backlog: pressure, but their demand is capped by a scarce
    # check endpoint (or it is paused): another worker would only hold more for it.
    p = AutoscalePolicy(min_workers=1, max_workers=4, idle_shrink_s=10, sustain_ticks=1)
    for t in range(5):
        assert p.decide(PoolSample(1000, 1, 10, 10, 0, float(t), held=True)) == 0
    assert p.last_reason == "held by a check endpoint"
    assert p.decide(PoolSample(1000, 1, 10, 10, 0, 6.0)) == +1  # the endpoint freed up


def test_a_held_pool_still_shrinks_when_idle_and_respects_min() -> None:
    p = AutoscalePolicy(min_workers=1, max_workers=4, idle_shrink_s=5, sustain_ticks=1)
    workers = 3
    for t in range(30):
        workers += p.decide(PoolSample(0, workers, 0, workers * 10, 0, float(t), held=True))
    assert workers == 1
    assert p.decide(PoolSample(0, 0, 0, 0, 0, 31.0, held=True)) == +1  # below min


# -- where a new worker goes ------------------------------------------------------------------


def test_spread_target_fills_the_emptiest_node_first() -> None:
    assert spread_target(["b", "a"], {}) == "a"
    assert spread_target(["a", "b"], {"a": 1}) == "b"
    assert spread_target(["a", "b", "c"], {"a": 2, "b": 1, "c": 1}) == "b"
    # A node the pool has workers on but that is gone does not count.
    assert spread_target(["b", "c"], {"a": 0, "b": 3, "c": 4}) == "b"
    assert spread_target([], {"a": 1}) is None


def test_spread_target_balances_a_pool_over_every_node() -> None:
    nodes = ["n1", "n2", "n3"]
    for offset in range(4):
        placed: dict[str, int] = {}
        for _ in range(7):
            node = spread_target(nodes, placed, offset)
            assert node is not None
            placed[node] = placed.get(node, 0) + 1
        assert sorted(placed.values()) == [2, 2, 3], (offset, placed)


def test_spread_target_starts_each_stage_on_its_own_node() -> None:
    """Three pools of one worker on two nodes: not all three on the same node."""
    firsts = [spread_target(["x", "y"], {}, offset) for offset in range(3)]
    assert firsts == ["x", "y", "x"]
