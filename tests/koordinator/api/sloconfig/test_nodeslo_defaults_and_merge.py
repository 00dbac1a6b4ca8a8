"""NodeSLO defaults and the koordlet's overlay of a NodeSLO spec onto them."""

from __future__ import annotations

from koordinator.api.sloconfig.merge import merge
from koordinator.api.sloconfig.nodeslo import default_node_slo_spec, merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec, SystemStrategy


def test_defaults_match_upstream():
    spec = default_node_slo_spec().to_dict()
    assert spec["resourceUsedThresholdWithBE"] == {
        "enable": False,
        "cpuSuppressThresholdPercent": 65,
        "memoryEvictThresholdPercent": 70,
        "cpuSuppressPolicy": "cpuset",
        "cpuEvictPolicy": "evictByRealLimit",
    }
    assert spec["cpuBurstStrategy"] == {
        "policy": "none",
        "cpuBurstPercent": 1000,
        "cfsQuotaBurstPercent": 300,
        "cfsQuotaBurstPeriodSeconds": -1,
        "sharePoolThresholdPercent": 50,
    }
    assert spec["systemStrategy"] == {"totalNetworkBandwidth": "0"}
    qos = spec["resourceQOSStrategy"]
    assert qos["policies"] == {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"}
    assert qos["cgroupRoot"] == {"blkioQOS": {"enable": False}}
    expected_cpu = {
        "lsrClass": (2, True),
        "lsClass": (2, True),
        "beClass": (-1, False),
        "systemClass": (0, False),
    }
    for name, (gi, expeller) in expected_cpu.items():
        assert qos[name]["cpuQOS"] == {
            "groupIdentity": gi,
            "schedIdle": 0,
            "coreExpeller": expeller,
            "enable": False,
        }
        assert qos[name]["blkioQOS"] == {"enable": False}
        assert qos[name]["networkQOS"] == {
            "ingressRequest": 0,
            "ingressLimit": 0,
            "egressRequest": 0,
            "egressLimit": 0,
            "enable": False,
        }
    assert qos["beClass"]["resctrlQOS"] == {
        "catRangeStartPercent": 0,
        "catRangeEndPercent": 30,
        "mbaPercent": 100,
        "enable": False,
    }
    assert qos["lsClass"]["resctrlQOS"]["catRangeEndPercent"] == 100
    memory = {name: qos[name]["memoryQOS"] for name in expected_cpu}
    assert (
        memory["lsrClass"]["wmarkRatio"],
        memory["lsrClass"]["wmarkScalePermill"],
        memory["lsrClass"]["wmarkMinAdj"],
    ) == (95, 20, -25)
    assert memory["beClass"]["wmarkMinAdj"] == 50
    assert (
        memory["systemClass"]["wmarkRatio"],
        memory["systemClass"]["wmarkScalePermill"],
        memory["systemClass"]["wmarkMinAdj"],
    ) == (0, 50, 0)


def test_empty_spec_gives_defaults_with_disabled_classes_reset():
    merged = merge_node_slo_spec(NodeSLOSpec()).to_dict()
    be = merged["resourceQOSStrategy"]["beClass"]
    # disabled classes are reset to the "none" config that turns the feature off
    assert be["cpuQOS"] == {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False, "enable": False}
    assert be["resctrlQOS"] == {
        "catRangeStartPercent": 0,
        "catRangeEndPercent": 100,
        "mbaPercent": 100,
        "enable": False,
    }
    assert be["memoryQOS"]["wmarkScalePermill"] == 50
    assert be["memoryQOS"]["wmarkRatio"] == 0
    # the SYSTEM class is not reset
    assert merged["resourceQOSStrategy"]["systemClass"]["memoryQOS"]["wmarkScalePermill"] == 50
    assert merged["resourceQOSStrategy"]["systemClass"]["cpuQOS"]["enable"] is False


def test_enabled_class_keeps_defaults_under_its_overrides():
    spec = NodeSLOSpec.from_dict(
        {
            "resourceQOSStrategy": {
                "beClass": {"cpuQOS": {"enable": True}, "memoryQOS": {"enable": True, "minLimitPercent": 20}},
                "lsClass": {"cpuQOS": {"enable": True, "groupIdentity": 1}},
            }
        }
    )
    qos = merge_node_slo_spec(spec).to_dict()["resourceQOSStrategy"]
    assert qos["beClass"]["cpuQOS"] == {
        "groupIdentity": -1,
        "schedIdle": 0,
        "coreExpeller": False,
        "enable": True,
    }
    assert qos["beClass"]["memoryQOS"]["minLimitPercent"] == 20
    assert qos["beClass"]["memoryQOS"]["wmarkMinAdj"] == 50
    assert qos["lsClass"]["cpuQOS"]["groupIdentity"] == 1
    assert qos["lsrClass"]["cpuQOS"]["groupIdentity"] == 0  # still disabled -> none


def test_sections_merge_independently():
    spec = NodeSLOSpec.from_dict(
        {
            "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 70},
            "cpuBurstStrategy": {"policy": "auto"},
            "systemStrategy": {"watermarkScaleFactor": 150, "totalNetworkBandwidth": "10G"},
            "extensions": {"vendor": {"a": 1}},
            "hostApplications": [{"name": "nginx", "qos": "LS"}],
        }
    )
    merged = merge_node_slo_spec(spec).to_dict()
    assert merged["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 70
    assert merged["resourceUsedThresholdWithBE"]["memoryEvictThresholdPercent"] == 70
    assert merged["resourceUsedThresholdWithBE"]["enable"] is True
    assert merged["cpuBurstStrategy"]["policy"] == "auto"
    assert merged["cpuBurstStrategy"]["cfsQuotaBurstPercent"] == 300
    assert merged["systemStrategy"] == {"watermarkScaleFactor": 150, "totalNetworkBandwidth": "10G"}
    assert merged["extensions"] == {"vendor": {"a": 1}}
    assert merged["hostApplications"] == [{"name": "nginx", "qos": "LS"}]


def test_merge_semantics_follow_go_json_overlay():
    base = SystemStrategy.from_dict({"schedFeatures": {"A": True, "B": True}, "totalNetworkBandwidth": "10G"})
    override = SystemStrategy.from_dict({"schedFeatures": {"B": False}})
    merged = merge(base, override).to_dict()
    assert merged["schedFeatures"] == {"A": True, "B": False}  # maps gain/replace keys
    # a non-omitempty field of the override always wins (Go writes "0")
    assert merged["totalNetworkBandwidth"] == "0"
    assert merge(base, None).to_dict() == base.to_dict()
