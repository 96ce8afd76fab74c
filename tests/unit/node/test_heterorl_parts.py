"""HeteroRL's parts, each on its own: the weight announcement codec, the follower's rules (WeightBook), the
weights as bytes and back (full and LoRA, every rejection), the delay simulator, the staleness bound, the
roles' config rules."""

from __future__ import annotations

import statistics

import pytest
import torch

from node.config import ConfigError, parse_config
from node.heterorl.learner import staleness_metrics, staleness_reason
from node.heterorl.weights import WeightsRejected, apply_weights, export_weights, weights_format
from node.models.config import LoraSpec, ModelConfig
from node.models.load import load_model
from node.round.config import DelayConfig
from node.round.delay import DelayLine, DelayModel
from protocols.codec import RecordError
from protocols.weights import WeightAnnouncement, decode_weight_announcement, encode_weight_announcement
from swarm.weights.channel import InMemoryWeightHub, InMemoryWeights, WeightBook, WeightLimits, make_weight_announcement

L1, L2, EVE = "QmTrainerA" + "a" * 30, "QmTrainerB" + "b" * 30, "QmEve" + "e" * 36


# -- announcement codec --------------------------------------------------------------------------------

def test_announcement_round_trip_and_rejections():
    ann, value = make_weight_announcement(L1, 3, b"weights", "full", now=100.0)
    assert decode_weight_announcement(value) == ann and ann.nbytes == 7
    bad = [b"\x00" * 2000, b"not msgpack \xc1", encode_weight_announcement(ann)[:-3],
           encode_weight_announcement(WeightAnnouncement(L1, -1, ann.sha256, 7, "full", 1.0)),
           encode_weight_announcement(WeightAnnouncement(L1, 1, "ab" * 32, 7, "delta", 1.0)),
           encode_weight_announcement(WeightAnnouncement(L1, 1, "AB" * 32, 7, "full", 1.0)),
           encode_weight_announcement(WeightAnnouncement(L1, 1, ann.sha256, 0, "full", 1.0)), 42]
    for value in bad:
        with pytest.raises(RecordError) as exc:
            decode_weight_announcement(value)
        assert exc.value.reason == "bad_announcement"
    with pytest.raises(RecordError) as exc:
        decode_weight_announcement(encode_weight_announcement(WeightAnnouncement(L1, 1, ann.sha256, 7, "full", 1.0, v=1)))
    assert exc.value.reason == "version"


# -- the follower's rules ------------------------------------------------------------------------------

def _book(**limits) -> WeightBook:
    return WeightBook([L1, L2], "full", WeightLimits(**{"retry_s": 10.0, **limits}))


def test_book_fetches_newest_once_and_hands_it_out_once():
    book = _book()
    ann, value = make_weight_announcement(L1, 1, b"v1", "full", now=10.0)
    assert book.offer(L1, L1, value, now=11.0) == ann
    assert book.offer(L1, L1, value, now=11.5) is None  # in flight: one fetch at a time, never twice
    assert book.settle(ann, b"v1", now=12.0)
    update = book.take()
    assert (update.version, update.data, update.learner) == (1, b"v1", L1) and update.latency_s == 2.0
    assert book.take() is None and book.offer(L1, L1, value, now=13.0) is None  # held: not fetched again
    old, old_value = make_weight_announcement(L2, 9, b"old", "full", now=5.0)
    assert book.offer(L2, L2, old_value, now=13.0) is None  # older than what we hold, whatever its version
    # a restarted learner: a lower version, a newer time → followed
    restart, restart_value = make_weight_announcement(L1, 0, b"v0-again", "full", now=20.0)
    assert book.offer(L1, L1, restart_value, now=21.0) == restart
    # the same bytes announced again later: nothing to fetch
    book.settle(restart, b"v0-again", now=21.5)
    book.take()
    again, again_value = make_weight_announcement(L1, 0, b"v0-again", "full", now=30.0)
    assert book.offer(L1, L1, again_value, now=31.0) is None
    assert not book.take_drops()


def test_book_relabels_the_weights_it_holds_when_a_step_left_them_unchanged():
    book = _book()
    ann, value = make_weight_announcement(L1, 4, b"same", "full", now=10.0)
    book.offer(L1, L1, value, now=10.0)
    book.settle(ann, b"same", now=10.0)
    book.take()
    _, value = make_weight_announcement(L1, 5, b"same", "full", now=20.0)  # a zero-gradient step
    assert book.offer(L1, L1, value, now=20.0) is None  # nothing to fetch
    update = book.take()
    assert update.relabel and update.version == 5 and update.data == b""
    assert book.take() is None


def test_book_vets_before_fetching_and_counts_each_value_once():
    book = _book(max_bytes=100)
    _, forged = make_weight_announcement(L1, 1, b"x", "full", now=10.0)
    _, lying = make_weight_announcement(EVE, 1, b"x", "full", now=10.0)  # peer field ≠ signer
    _, lora = make_weight_announcement(L1, 1, b"x", "lora", now=10.0)
    _, huge = make_weight_announcement(L2, 1, b"x" * 101, "full", now=10.0)
    _, future = make_weight_announcement(L2, 1, b"y", "full", now=1000.0)
    for _ in range(3):  # read on every poll, counted once
        assert book.offer(L1, EVE, forged, now=11.0) is None  # stored under L1's key by another signer
        assert book.offer(L1, None, forged, now=11.0) is None  # no owner subkey
        assert book.offer(L1, L1, lying, now=11.0) is None
        assert book.offer(L2, L2, huge, now=11.0) is None
        assert book.offer(EVE, EVE, lying, now=11.0) is None  # a key we do not follow: ignored
    assert book.offer(L1, L1, lora, now=11.0) is None
    assert book.offer(L2, L2, future, now=11.0) is None
    assert book.offer(L1, L1, b"\x00garbage", now=11.0) is None
    assert book.take_drops() == {"forged": 3, "too_large": 1, "format": 1, "future_timestamp": 1,
                                 "bad_announcement": 1}


def test_book_checks_digest_and_retries_a_failed_fetch_later():
    book = _book()
    ann, value = make_weight_announcement(L1, 1, b"right", "full", now=10.0)
    assert book.offer(L1, L1, value, now=11.0) == ann
    assert not book.settle(ann, b"wrong", now=11.0)  # same size, other bytes
    assert book.offer(L1, L1, value, now=12.0) is None  # not before retry_s
    assert book.offer(L1, L1, value, now=21.5) == ann
    assert not book.settle(ann, None, now=22.0)
    assert book.offer(L1, L1, value, now=33.0) == ann
    assert book.settle(ann, b"right", now=33.0) and book.take().data == b"right"
    assert book.take_drops() == {"digest_mismatch": 1, "fetch_failed": 1}


def test_in_memory_channel_serves_only_the_newest_versions():
    hub = InMemoryWeightHub()
    learner = InMemoryWeights(hub, L1, keep=1)
    sampler = InMemoryWeights(hub, "QmSampler" + "s" * 30, follow=[L1])
    assert sampler.take() is None
    learner.publish(0, b"zero", "full")
    learner.publish(1, b"one", "full")
    assert sampler.take().data == b"one"
    learner.publish(2, b"two", "full")
    learner.close()  # gone: its announcement stays, its bytes do not
    assert sampler.take() is None and sampler.take_drops() == {"fetch_failed": 1}


# -- weights as bytes ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    return lambda lora=None: load_model(ModelConfig(spec="tiny-qwen2", lora=lora)).model


def test_full_weights_round_trip_and_rejections(tiny):
    a, b = tiny(), tiny()
    with torch.no_grad():
        for p in a.parameters():
            p.add_(0.01)
    data = export_weights(a)
    assert data == export_weights(a)  # deterministic: the same weights, the same digest
    before = {k: v.clone() for k, v in b.state_dict().items()}
    for bad, reason in ((b"\x00" * 64, "weights_decode"), (data[:-10], "weights_decode")):
        with pytest.raises(WeightsRejected) as exc:
            apply_weights(b, bad, "full")
        assert exc.value.reason == reason
    from safetensors.torch import load, save

    tensors = load(data)
    name = next(iter(tensors))
    for edit, reason in (({**tensors, name: tensors[name][:1]}, "weights_mismatch"),
                         ({k: v for k, v in tensors.items() if k != name}, "weights_mismatch"),
                         ({**tensors, "extra.weight": torch.zeros(2)}, "weights_mismatch"),
                         ({**tensors, name: tensors[name].to(torch.float16)}, "weights_mismatch"),
                         ({**tensors, name: tensors[name] * float("nan")}, "weights_nonfinite")):
        with pytest.raises(WeightsRejected) as exc:
            apply_weights(b, save(edit), "full")
        assert exc.value.reason == reason
    with pytest.raises(WeightsRejected) as exc:
        apply_weights(b, data, "lora")
    assert exc.value.reason == "format"
    assert all(torch.equal(before[k], v) for k, v in b.state_dict().items())  # rejected: untouched
    apply_weights(b, data, "full")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_lora_adapter_round_trip(tiny):
    spec = LoraSpec(r=4, alpha=8)
    a, b = tiny(spec), tiny(spec)
    assert weights_format(a) == "lora"
    with torch.no_grad():
        for name, p in a.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    data = export_weights(a)
    assert len(data) < 0.5 * len(export_weights(tiny()))  # the adapter only, not the base
    apply_weights(b, data, "lora")
    for (n, x), y in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(x, y), n


# -- delay simulator and staleness ----------------------------------------------------------------------

def test_delay_model_is_the_papers_clipped_lognormal():
    model = DelayModel(DelayConfig(kind="lognormal", seed=1))
    draws = [model.draw() for _ in range(20000)]
    assert min(draws) == 60.0 and max(draws) <= 1920.0
    assert 265 < statistics.median(draws) < 295 and 0.03 < sum(d == 60.0 for d in draws) / len(draws) < 0.06
    assert abs(model.quantile(0.5) - 279.3) < 1
    scaled = DelayModel(DelayConfig(kind="lognormal", seed=1, time_scale=0.01))
    assert [scaled.draw() for _ in range(5)] == pytest.approx([d * 0.01 for d in draws[:5]])
    assert DelayModel(DelayConfig(kind="fixed", fixed_s=3, time_scale=2)).draw() == 6.0


def test_delay_line_holds_each_item_for_its_draw_and_is_bounded():
    cfg = DelayConfig(kind="lognormal", seed=7, time_scale=0.01, max_held=3)
    line, again = DelayLine(cfg), DelayModel(cfg)
    expected = [again.draw() for _ in range(3)]
    assert line.hold(["a", "b", "c", "d"], now=100.0) == 1  # the fourth is refused
    assert line.release(100.0 + min(expected) - 1e-6) == []
    order = [x for _, x in sorted(zip(expected, "abc"))]
    assert line.release(100.0 + max(expected)) == order and line.held() == 0
    assert sorted(line.take_delays()) == sorted(expected)


def test_staleness_bound():
    assert staleness_reason(10, 10, 0) is None and staleness_reason(10, 6, 4) is None
    assert staleness_reason(10, 5, 4) == "stale_version" and staleness_reason(10, 11, 4) == "future_version"
    assert staleness_reason(10, 0, None) is None
    m = staleness_metrics([0, 2, 2, 5])
    assert (m["staleness_mean"], m["staleness_max"], m["staleness_counts"]) == (2.25, 5, {"0": 1, "2": 2, "5": 1})


# -- the roles' config ---------------------------------------------------------------------------------

def _cfg(**top) -> dict:
    return {"model": {"spec": "tiny-qwen2"}, "tasks": {"datasets": [{"name": "chain_sum"}]}, **top}


def test_role_config_rules():
    assert parse_config(_cfg(role="sampler", heterorl={"follow": [L1]})).swarm.max_fetches_per_window == 0
    assert parse_config(_cfg(role="sampler", swarm={"max_fetches_per_window": 3})).swarm.max_fetches_per_window == 3
    learner = parse_config(_cfg(role="learner", ingest={"max_delay_steps": 4, "delay": {"kind": "lognormal",
                                                                                       "time_scale": 0.1}}))
    assert learner.ingest.delay.longest_s == pytest.approx(192.0)
    assert parse_config(_cfg(role="sampler", swarm={"client_mode": True})).swarm.client_mode  # it only dials out
    for bad, words in ((_cfg(ingest={"max_delay_steps": 4}), "role learner only"),
                       (_cfg(role="learner", ingest={"delay": {"kind": "lognormal"}}), "max_age_s"),
                       (_cfg(role="sampler", heterorl={"follow": ["not a peer id"]}), "base58"),
                       (_cfg(role="learner", ingest={"delay": {"kind": "lognormal", "min_s": 9, "max_s": 1}}),
                        "min_s"),
                       (_cfg(role="learner", swarm={"client_mode": True}), "client_mode"),
                       (_cfg(role="observer"), "role")):
        with pytest.raises(ConfigError, match=words):
            parse_config(bad)
