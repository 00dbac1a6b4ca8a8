"""docs/slo-controller-config.md is what the generator writes, and what it says still holds in the code."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.manager.controllers.nodeslo import NODE_SLO_KEYS
from controlplane.manager.controllers.sloconfig import SLOConfigCache, parse_slo_config
from controlplane.manager.webhooks.configmap.sloconfig import CHECKED_KEYS
from koordinator.api.model import Model, model_fields
from koordinator.api.sloconfig import reference
from koordinator.api.sloconfig.config import (
    CONFIG_KEYS,
    REASON_SLO_INVALID,
    colocation_strategy_for_node,
    parse_config,
)
from koordinator.api.sloconfig.nodeslo import default_resource_qos_strategy
from koordinator.api.sloconfig.reference import FIELDS, KEYS, RATIO_LABELS
from koordinator.api.types.core import LabelSelector

ROOT = Path(__file__).resolve().parents[4]
DOC = ROOT / "docs" / "slo-controller-config.md"
CONSUMERS = [ROOT / "controlplane", ROOT / "koordlet"]


def page() -> str:
    return DOC.read_text(encoding="utf-8")


def block(name: str) -> str:
    """The text of one generated block of the page."""
    return page().split(f"<!-- BEGIN GENERATED {name} ", 1)[1].split("<!-- END GENERATED", 1)[0]


def flat(text: str) -> str:
    return " ".join(text.split())


# ---- the page is the generator's output ---------------------------------------------------------


def test_page_matches_the_generator():
    assert reference.main(["--doc", str(DOC), "--check"]) == 0, (
        "run `python -m koordinator.api.sloconfig.reference` and commit docs/slo-controller-config.md"
    )


def test_check_fails_on_a_stale_page_and_the_command_repairs_it(tmp_path, capsys):
    stale = tmp_path / "page.md"
    stale.write_text(page().replace("| `enable` | boolean | `false` |", "| `enable` | boolean | `true` |", 1))
    assert reference.main(["--doc", str(stale), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert reference.main(["--doc", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == page()


def test_update_refuses_pages_without_every_block_or_with_unknown_ones():
    blocks = reference.blocks()
    with pytest.raises(ValueError, match="lacks the generated blocks"):
        reference.update("# nothing generated here\n", blocks)
    with pytest.raises(ValueError, match="unknown generated block"):
        reference.update("<!-- BEGIN GENERATED nope (x) -->\n<!-- END GENERATED nope -->\n", blocks)
    with pytest.raises(ValueError, match="no end marker"):
        reference.update("<!-- BEGIN GENERATED keys (x) -->\n", blocks)


def test_the_page_states_the_upstream_behaviour_it_follows():
    assert "upstream main at commit a7a1b76 (2026-07-24)" in flat(page())


# ---- every field is documented, with its default ------------------------------------------------


def _declared_fields(model: type[Model], seen: set[type[Model]]) -> set[tuple[type[Model], str]]:
    """(declaring class, JSON name) of every field reachable from ``model`` (selectors excluded)."""
    if model in seen or model is LabelSelector:
        return set()
    seen.add(model)
    out: set[tuple[type[Model], str]] = set()
    for slot in model_fields(model):
        owner = next(c for c in model.__mro__ if slot.attr in inspect.get_annotations(c))
        desc = slot.type
        nested = desc.model if desc.kind == "model" else (desc.item.model if desc.item is not None else None)
        if (
            nested is not None
            and nested is not LabelSelector
            and desc.kind == "model"
            and nested not in reference._SEPARATE
        ):
            # flattened into dotted rows: its fields are documented, not the object itself
            out |= _declared_fields(nested, seen)
            continue
        out.add((owner, slot.info.json))
        if nested is not None:
            out |= _declared_fields(nested, seen)
    return out


def _names(fields: set[tuple[type[Model], str]]) -> list[str]:
    return sorted(f"{model.__name__}.{name}" for model, name in fields)


def test_every_field_of_every_key_has_a_field_doc_and_no_doc_is_stale():
    declared: set[tuple[type[Model], str]] = set()
    for model in CONFIG_KEYS.values():
        declared |= _declared_fields(model, set())
    assert _names(declared - set(FIELDS)) == [], "add these fields to reference.FIELDS"
    assert _names(set(FIELDS) - declared) == [], "these FIELDS entries match no model field"


def test_every_documented_row_appears_in_the_page():
    for key in KEYS:
        section = block(f"fields:{key.key}")
        for row in reference._key_rows(key):
            assert f"| `{row.path}` |" in section, f"{key.key}: {row.path} is missing"


@pytest.mark.parametrize("key", [k for k in KEYS if k.defaults is not None], ids=lambda k: k.key)
def test_every_strategy_field_shows_its_default(key):
    """Each scalar field of a key's strategy carries the default of the key's default strategy."""
    assert key.defaults is not None
    defaults = key.defaults().to_dict()
    text = block(f"fields:{key.key}")
    prefix = (
        ""
        if key.strategy.__name__
        in ("ColocationStrategy", "CPUNormalizationStrategy", "ResourceAmplificationStrategy")
        else "clusterStrategy."
    )
    checked = 0
    for slot in model_fields(key.strategy):
        if slot.type.kind not in ("str", "int", "float", "bool", "quantity"):
            continue
        line = next(line for line in text.splitlines() if line.startswith(f"| `{prefix}{slot.info.json}` |"))
        default_cell = line.split(" | ")[2]
        value = defaults.get(slot.info.json)
        expected = "unset" if value is None else f"`{json.dumps(value).strip(chr(34))}`"
        assert default_cell.startswith(expected), (slot.info.json, default_cell, expected)
        checked += 1
    assert checked or key.key == "resource-qos-config"


def _leaves(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{name}.")
        else:
            out[f"{prefix}{name}"] = value
    return out


def test_every_qos_class_field_shows_each_class_default():
    text = block("fields:resource-qos-config")
    checked = 0
    for name, qos in default_resource_qos_strategy().classes().items():
        assert qos is not None
        for path, value in _leaves(qos.to_dict()).items():
            line = next(line for line in text.splitlines() if line.startswith(f"| `<class>.{path}` |"))
            cell = line.split(" | ")[2]
            shown = f"`{json.dumps(value)}`"
            if "(every class)" in cell:
                assert cell.startswith(shown), (name, path, cell)
            else:
                part = next(p for p in cell.split("; ") if f"`{name}`" in p.split(":")[0])
                assert part.endswith(shown), (name, path, cell)
            checked += 1
    assert checked > 40


# ---- what the page says each field does still holds -----------------------------------------------


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} does not exist"
    assert spec.origin is not None
    return Path(spec.origin).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("field", "reader"),
    [
        pytest.param(key, reader, id=f"{key[0].__name__}.{key[1]}<-{reader}")
        for key, doc in FIELDS.items()
        for reader in doc.readers
    ],
)
def test_named_readers_still_read_the_field(field, reader):
    model, json_name = field
    module, _, token = reader.partition(":")
    if not token:
        token = next(s.attr for s in model_fields(model) if s.info.json == json_name)
    assert token in _source(module), f"{module} no longer reads {model.__name__}.{json_name} ({token!r})"


def test_fields_acted_on_name_a_reader_and_fields_not_acted_on_name_none():
    for (model, json_name), doc in FIELDS.items():
        if doc.acted_on:
            assert doc.readers, f"{model.__name__}.{json_name}: say which module acts on it"
        else:
            assert not doc.readers, f"{model.__name__}.{json_name} is documented as not acted on"
            assert "Not acted on" in doc.use


def _consumer_sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for root in CONSUMERS for p in root.rglob("*.py")}


#: attribute reads of fields "not acted on" that are about something else
_NOT_THE_CONFIG = {
    # the pod annotation koordinator.sh/networkQOS has an ingressLimit too (parsed, not enforced)
    "ingress_limit": {"koordlet/runtimehooks/hooks/tc.py"},
}
_GENERIC = {"enable", "name", "node_selector", "node_configs", "strategy"}


def test_fields_documented_as_not_acted_on_are_not_read_by_any_component():
    sources = _consumer_sources()
    for (model, json_name), doc in FIELDS.items():
        if doc.acted_on:
            continue
        attr = next(s.attr for s in model_fields(model) if s.info.json == json_name)
        if attr in _GENERIC:
            continue
        pattern = re.compile(rf"\.{attr}\b")
        readers = {
            str(path.relative_to(ROOT)) for path, text in sources.items() if pattern.search(text)
        } - _NOT_THE_CONFIG.get(attr, set())
        assert not readers, (
            f"{model.__name__}.{json_name} is documented as not acted on but {sorted(readers)} read it: "
            "update reference.FIELDS and regenerate the page"
        )


def test_normalization_and_amplification_keys_are_marked_used_in_the_key_table():
    keys = block("keys")
    for key in ("cpu-normalization-config", "resource-amplification-config"):
        line = next(line for line in keys.splitlines() if line.startswith(f"| `{key}` |"))
        assert "**used**" in line


# ---- claims of the prose ---------------------------------------------------------------------------


def test_event_reasons_and_messages_are_the_controllers():
    recorded: list[tuple[str, str, str]] = []

    class Recorder:
        async def record(
            self, obj: Any, event_type: str, reason: str, message: str, *, kind: str = "Pod"
        ) -> None:
            recorded.append((event_type, reason, message))

    good = {k: json.dumps(v) for k, v in reference.EXAMPLE.items()}
    broken = {**good, **{k: json.dumps(v) for k, v in reference.BROKEN.items()}}

    async def run() -> None:
        cache = SLOConfigCache("koordinator-system", "slo-controller-config", recorder=Recorder())  # type: ignore[arg-type]
        cache.apply({"metadata": {"name": "slo-controller-config"}, "data": good})
        cache.mark_synced()
        cache.apply({"metadata": {"name": "slo-controller-config"}, "data": broken})
        await asyncio.sleep(0)

    asyncio.run(run())
    assert len(recorded) == len(reference.BROKEN)
    assert {event_type for event_type, _, _ in recorded} == {"Warning"}
    assert {reason for _, reason, _ in recorded} == {REASON_SLO_INVALID}
    lines = "\n".join(f"{reason}: {message}" for _, reason, message in recorded)
    assert f"```text\n{lines}\n```" in page()


def test_the_example_configmap_in_the_page_is_valid():
    example = block("example").split("```yaml\n", 1)[1].split("\n```", 1)[0]
    configmap = yaml.safe_load(example)
    assert configmap["metadata"] == {"name": "slo-controller-config", "namespace": "koordinator-system"}
    _, errors = parse_config(configmap["data"])
    assert [str(e) for e in errors] == []


@pytest.mark.parametrize("label", sorted(RATIO_LABELS))
def test_ratio_labels_set_the_documented_fields(label):
    config, _ = parse_config(None)
    node = {"metadata": {"name": "n", "labels": {label: "0.42"}}}
    strategy = colocation_strategy_for_node(config, node).to_dict()
    assert strategy[RATIO_LABELS[label]] == 42


def test_a_ratio_label_wins_over_the_colocation_annotation():
    config, _ = parse_config(None)
    label = next(iter(RATIO_LABELS))
    node = {
        "metadata": {
            "name": "n",
            "labels": {label: "0.3"},
            "annotations": {
                "node.koordinator.sh/colocation-strategy": json.dumps({RATIO_LABELS[label]: 80}),
            },
        }
    }
    assert colocation_strategy_for_node(config, node).to_dict()[RATIO_LABELS[label]] == 30


def test_the_fields_that_must_be_positive_are_refused_at_zero_in_the_cluster_strategy():
    names = reference.positive_colocation_fields()
    assert "degradeTimeMinutes" in names
    assert "resourceDiffThreshold" in names
    for name in names:
        parsed = parse_slo_config({"colocation-config": json.dumps({"enable": True, name: 0})})
        assert "colocation-config" in parsed.errors, name


def test_the_fields_documented_as_0_or_more_are_accepted_at_zero():
    names = reference.validity_rules()["0 or more"]
    assert {"cpuReclaimThresholdPercent", "memoryReclaimThresholdPercent"} <= set(names)
    for name in names:
        parsed = parse_slo_config({"colocation-config": json.dumps({"enable": True, name: 0})})
        assert parsed.errors == {}, name
        assert colocation_strategy_for_node(parsed.config, None).is_valid(), name


def test_the_webhook_keys_of_the_generator_are_the_webhooks():
    assert list(reference.WEBHOOK_CHECKED_KEYS) == list(CHECKED_KEYS)


def test_the_webhook_and_node_slo_key_lists_in_the_prose_are_the_codes():
    text = flat(page())
    *head, last = [f"`{k}`" for k in CHECKED_KEYS]
    assert f"among {', '.join(head)} and {last}, in that order" in text
    slo_keys = re.search(r"The NodeSLO keys \(([^)]*)\)", text)
    assert slo_keys is not None
    assert set(re.findall(r"`([\w-]+)`", slo_keys[1])) == set(NODE_SLO_KEYS)


def test_the_manager_flags_named_in_the_page_exist():
    options = _source("controlplane.manager.options")
    koordlet_flags = {"--feature-gates", "--enable-pagecache-collector"}
    for flag in set(re.findall(r"`(--[\w-]+)`", page())) - koordlet_flags:
        assert f'"{flag}"' in options, flag
    assert '"--enable-pagecache-collector"' in _source("koordlet.__main__")


def test_selectors_are_documented_as_one_field():
    for key in KEYS:
        for row in reference._key_rows(key):
            if row.slot.type.model is LabelSelector:
                assert row.path.endswith("].nodeSelector"), row.path
