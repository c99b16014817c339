import pytest
from pydantic import ValidationError

from eval.settings import CompressionSpec, GridConfig, Setting


def test_default_grid_is_three_compressions_by_two_top_ks() -> None:
    settings = GridConfig().expand()
    assert len(settings) == 6
    assert {(s.compressor, s.target_ratio, s.top_k) for s in settings} == {
        (c, r, k) for c, r in [("none", 1.0), ("llmlingua", 4.0), ("longllmlingua", 4.0)] for k in (3, 8)
    }
    assert len({s.config_hash() for s in settings}) == 6
    assert len({s.name for s in settings}) == 6


def test_a_compression_can_be_held_to_some_top_ks_and_its_settings_keep_their_hashes() -> None:
    grid = GridConfig(
        compressions=[CompressionSpec(), CompressionSpec(compressor="llmlingua", target_ratio=4.0, top_ks=[3])]
    )
    names = [s.name for s in grid.expand()]
    assert names == ["none-k3-hybrid-dense", "none-k8-hybrid-dense", "llmlingua-4x-k3-hybrid-dense"]
    everywhere = {s.name: s.config_hash() for s in GridConfig().expand()}
    assert all(everywhere[s.name] == s.config_hash() for s in grid.expand())  # the same settings, the same rows
    with pytest.raises(ValidationError, match=r"compressions\[1\].top_ks: \[5\] not among the grid's top_ks"):
        GridConfig(compressions=[CompressionSpec(), CompressionSpec(compressor="llmlingua", top_ks=[5])])


def test_config_hash_is_stable_and_sensitive() -> None:
    a = Setting(top_k=3, compressor="llmlingua", target_ratio=4.0)
    assert a.config_hash() == Setting(top_k=3, compressor="llmlingua", target_ratio=4.0).config_hash()
    assert a.config_hash() != Setting(top_k=3, compressor="llmlingua", target_ratio=3.0).config_hash()
    assert Setting.model_validate_json(a.model_dump_json()) == a


@pytest.mark.parametrize(
    "kwargs",
    [
        {"top_k": 0},
        {"top_k": 3, "compressor": "none", "target_ratio": 4.0},
        {"top_k": 3, "compressor": "llmlingua"},
        {"top_k": 3, "typo": 1},
    ],
)
def test_invalid_settings_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValidationError):
        Setting(**kwargs)


def test_pruned_knobs_come_from_the_sweep_config_and_change_the_setting_hash() -> None:
    from eval.settings import SweepConfig

    base = {"index_path": "i", "questions_path": "q", "store_path": "s"}
    pruned = Setting(top_k=8, compressor="pruned", target_ratio=4.0)
    default = SweepConfig.model_validate(base)
    tuned = SweepConfig.model_validate(base | {"compressor": {"rank_prior": 0.1, "word_overlap": 1.0}})
    assert tuned.component_specs(pruned)["compressor"].config == {
        "max_cached": 200_000,
        "rank_prior": 0.1,
        "word_overlap": 1.0,
    }
    assert default.setting_hash(pruned) == pruned.config_hash()  # at the defaults: the hash every run had
    assert tuned.setting_hash(pruned) != pruned.config_hash()
    none = Setting(top_k=8)
    assert tuned.setting_hash(none) == none.config_hash()  # knobs of another compressor change nothing
