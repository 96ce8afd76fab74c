"""swarm.bucket: the token bucket every rate limit of the package uses."""

import math

from swarm.bucket import Buckets, TokenBucket


def test_a_bucket_starts_full_refuses_past_its_level_and_refills_at_its_rate_up_to_its_burst():
    b = TokenBucket(rate=2.0, burst=4.0, now=10.0)
    assert [b.take(1, 10.0) for _ in range(5)] == [True] * 4 + [False]
    assert b.level == 0.0
    assert b.wait_s(1, 10.0) == 0.5  # 2 tokens a second
    assert not b.take(1, 10.25) and b.take(1, 10.5)  # half a token after 0.25 s, one after 0.5 s
    assert b.refill(100.0) == 4.0  # never past the burst
    assert not b.take(5, 100.0) and b.level == 4.0  # a refused take takes nothing
    assert math.isinf(b.wait_s(5, 100.0))  # more than the burst never comes
    assert b.take(3, 100.0) and b.level == 1.0
    b.give_back(10)
    assert b.level == 4.0  # giving back never passes the burst either
    assert b.refill(50.0) == 4.0 and b.at == 100.0  # a clock read out of order adds nothing


def test_buckets_keep_one_bucket_per_key_and_forget_the_least_recently_used_past_the_cap():
    keyed = Buckets(rate=1.0, burst=2.0, max_keys=3)
    assert keyed.take("a", 2, 0.0) and not keyed.take("a", 1, 0.0)  # a's own bucket is empty
    assert keyed.take("b", 2, 0.0)  # b's is not a's
    keyed.take("c", 1, 0.0)
    keyed.get("a", 0.0)  # a used again: b is now the least recent
    keyed.take("d", 1, 0.0)  # a fourth key: b is forgotten
    assert len(keyed) == 3 and "b" not in keyed and "a" in keyed
    assert keyed.take("b", 2, 0.0)  # a forgotten key starts full
    assert keyed.peek("zz") is None and "zz" not in keyed  # peek adds nothing
    keyed.forget("a")
    assert keyed.take("a", 2, 0.0)  # forgotten on purpose: full again
