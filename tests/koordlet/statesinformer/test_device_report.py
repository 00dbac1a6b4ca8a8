"""The Device object the koordlet reports: entries, labels and topology built from NVML's
GPUs, sysfs's RDMA devices and koord-device-daemon's records (upstream's
``states_device_linux.go``), and the reporter writing it only when it changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordlet.statesinformer import device
from koordlet.statesinformer.device import DeviceReporter, DeviceSources, build_device_spec
from koordlet.system.devices import xpu
from koordlet.system.devices.nvml import GPUFault, GPUInfo, GPUInventory
from koordlet.system.devices.rdma import RDMADevice, VirtualFunction
from koordlet.system.devices.xpu import DeviceRecord, P2PLink, from_json, read_dir, to_json, write_atomically
from tests.koordlet.statesinformer.device_apiserver import validating_apiserver
from testsupport.fake import FakeApiServer

CRDS = Path(__file__).resolve().parents[3] / "crds"
GI = 1024**3


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # problems are logged once per process; every test starts as a new process would
    monkeypatch.setattr(device, "_warned", set())
    monkeypatch.setattr(xpu, "_warned", set())


def gpu(index: int, *, healthy: bool = True, numa: int | None = 0) -> GPUInfo:
    return GPUInfo(
        index=index,
        uuid=f"GPU-{index:08d}",
        minor=index,
        name="NVIDIA A100-SXM4-80GB",
        memory_total=80 * GI,
        bus_id=f"0000:{0x3B + index:02x}:00.0",
        mig_enabled=False,
        healthy=healthy,
        numa_node=numa,
        pcie_root="pci0000:3a",
    )


INVENTORY = GPUInventory(
    gpus=(gpu(0), gpu(1, healthy=False, numa=None)), driver_version="535.104.05", model="A100-SXM4-80GB"
)
RDMA_PF = RDMADevice(
    bus_id="0000:5e:00.0",
    ib_devices=("mlx5_0",),
    minor=0,
    healthy=True,
    numa_node=1,
    pcie_root="pci0000:5d",
    vendor_id=0x15B3,
    device_id=0x101B,
    vfs=(VirtualFunction("0000:5e:00.3"), VirtualFunction("0000:5e:00.2")),
)


def test_gpus_from_nvml_with_their_labels_and_topology() -> None:
    spec = build_device_spec(INVENTORY, [], [])
    assert spec.labels == {
        "node.koordinator.sh/gpu-vendor": "nvidia",
        "node.koordinator.sh/gpu-model": "A100-SXM4-80GB",
        "node.koordinator.sh/gpu-driver-version": "535.104.05",
    }
    first, second = spec.devices
    assert first == {
        "type": "gpu",
        "id": "GPU-00000000",
        "minor": 0,
        "health": True,
        "resources": {
            "koordinator.sh/gpu-core": "100",
            "koordinator.sh/gpu-memory": str(80 * GI),
            "koordinator.sh/gpu-memory-ratio": "100",
        },
        "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"},
    }
    # without a NUMA node the topology is left out, as upstream
    assert second["health"] is False
    assert "topology" not in second


def test_rdma_devices_with_their_virtual_functions() -> None:
    spec = build_device_spec(None, [RDMA_PF], [])
    assert spec.labels == {}
    assert spec.devices == [
        {
            "type": "rdma",
            "id": "0000:5e:00.0",
            "minor": 0,
            "health": True,
            "resources": {"koordinator.sh/rdma": "100"},
            "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:5d", "busID": "0000:5e:00.0"},
            "vfGroups": [
                {"vfs": [{"minor": -1, "busID": "0000:5e:00.2"}, {"minor": -1, "busID": "0000:5e:00.3"}]}
            ],
        }
    ]


def test_device_info_records_win_over_nvml() -> None:
    record = DeviceRecord(
        vendor="huawei",
        model="Ascend-910B",
        uuid="npu-1",
        minor=3,
        resources={"gpu-core": "100", "gpu-memory": "64Gi", "huawei.com/npu-core": "20"},
        node_id=0,
        pcie_id="pci0000:00",
        bus_id="0000:01:00.0",
    )
    spec = build_device_spec(INVENTORY, [], [record])
    assert spec.labels == {
        "node.koordinator.sh/gpu-vendor": "huawei",
        "node.koordinator.sh/gpu-model": "Ascend-910B",
    }
    (entry,) = spec.devices
    assert entry["id"] == "npu-1"
    assert entry["resources"] == {
        "koordinator.sh/gpu-memory-ratio": "100",
        "koordinator.sh/gpu-core": "100",
        "koordinator.sh/gpu-memory": "64Gi",
        "huawei.com/npu-core": "20",
    }


def test_records_round_trip_and_a_bad_file_loses_only_itself(tmp_path: Path) -> None:
    records = [
        DeviceRecord("nvidia", "T4", "GPU-1", 0, {"koordinator.sh/gpu-core": "100"}, bus_id="0000:01:00.0")
    ]
    write_atomically(tmp_path / "ic-device", to_json(records))
    (tmp_path / "broken").write_text("{not json")
    (tmp_path / "other").write_text('[{"uuid": "x", "minor": "1"}]')
    assert from_json((tmp_path / "ic-device").read_text()) == records
    found = read_dir(tmp_path)
    assert [r.uuid for r in found] == ["GPU-1", "x"]
    assert read_dir(tmp_path / "absent") == []


def node(uid: str = "node-uid") -> dict[str, Any]:
    return {"metadata": {"name": "n1", "uid": uid}}


async def test_the_reporter_creates_then_writes_only_changes() -> None:
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_devices.yaml")
        found: dict[str, Any] = {"gpus": INVENTORY, "rdmas": [RDMA_PF]}
        sources = DeviceSources(gpus=lambda: found["gpus"], rdmas=lambda: found["rdmas"])
        async with fake.client() as client:
            reporter = DeviceReporter(client, "n1", node, sources)
            assert await reporter.sync() is True
            device = fake.get(res.DEVICES, "n1")
            assert [d["type"] for d in device["spec"]["devices"]] == ["gpu", "gpu", "rdma"]
            assert device["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
            assert device["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "A100-SXM4-80GB"
            version = device["metadata"]["resourceVersion"]
            assert await reporter.sync() is False
            assert fake.get(res.DEVICES, "n1")["metadata"]["resourceVersion"] == version
            # the RDMA device goes away: one write, the GPUs stay
            found["rdmas"] = []
            assert await reporter.sync() is True
            assert [d["type"] for d in fake.get(res.DEVICES, "n1")["spec"]["devices"]] == ["gpu", "gpu"]
            # no devices at all: the Device stays, empty (upstream never deletes it)
            found["gpus"] = None
            assert await reporter.sync() is True
            assert fake.get(res.DEVICES, "n1")["spec"]["devices"] == []
            assert reporter.writes == 3


# --- records the apiserver would refuse: skipped one by one ----------------------------------


def _nvidia(uuid: str, minor: int, **fields: Any) -> DeviceRecord:
    values: dict[str, Any] = {
        "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi"},
        "node_id": 0,
        "pcie_id": "pci0000:3a",
        "bus_id": f"0000:{0x3B + minor:02x}:00.0",
        **fields,
    }
    return DeviceRecord("nvidia", "A100-SXM4-80GB", uuid, minor, **values)


async def test_a_resource_that_is_not_a_quantity_loses_only_itself(caplog) -> None:
    bad = _nvidia(
        "GPU-bad", 0, resources={"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "32 GB"}
    )
    good = _nvidia("GPU-good", 1, resources={"gpu-core": "100", "gpu-memory": "1.5Gi"})
    sources = DeviceSources(gpus=lambda: INVENTORY, records=lambda: [bad, good])
    async with validating_apiserver() as fake, fake.client() as client:
        reporter = DeviceReporter(client, "n1", node, sources, watch_gpu_health=None)
        with caplog.at_level("WARNING", logger="koordlet.statesinformer.device"):
            assert await reporter.sync() is True  # the apiserver accepts it
            assert await reporter.sync() is False
        devices = {d["id"]: d for d in fake.get(res.DEVICES, "n1")["spec"]["devices"]}
    assert devices["GPU-bad"]["resources"] == {
        "koordinator.sh/gpu-memory-ratio": "100",
        "koordinator.sh/gpu-core": "100",
    }
    # the good record's values as the apiserver would print them (upstream parses them)
    assert devices["GPU-good"]["resources"] == {
        "koordinator.sh/gpu-memory-ratio": "100",
        "koordinator.sh/gpu-core": "100",
        "koordinator.sh/gpu-memory": "1536Mi",
    }
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert warnings[0].startswith("device GPU-bad: resource koordinator.sh/gpu-memory '32 GB' left out")


def test_a_bad_record_loses_only_itself(tmp_path: Path, caplog) -> None:
    records = [
        {"vendor": "nvidia", "uuid": "GPU-1", "minor": "1", "resources": {"koordinator.sh/gpu-core": "100"}},
        {"vendor": "nvidia", "minor": "2"},  # no uuid
        "not a record",
        {"vendor": "nvidia", "uuid": "GPU-3", "minor": "three", "resources": {"a": 5, "b": {"x": 1}}},
        {"vendor": "nvidia", "uuid": "GPU-4", "minor": "4", "topology": "left", "status": []},
    ]
    (tmp_path / "ic-device").write_text(json.dumps(records))
    with caplog.at_level("WARNING", logger="koordlet.system.devices.xpu"):
        found = read_dir(tmp_path)
        assert read_dir(tmp_path) == found
    assert [(r.uuid, r.minor) for r in found] == [("GPU-1", 1), ("GPU-3", 0), ("GPU-4", 4)]
    assert found[1].resources == {"a": "5"}
    assert (found[2].has_topology, found[2].has_status) == (False, False)
    source = tmp_path / "ic-device"
    assert [r.getMessage() for r in caplog.records] == [
        f"{source}: device record 1 left out: a device record without uuid",
        f"{source}: device record 2 is not an object; left out",
        f"{source}: device GPU-3: minor 'three' is not a number; reported as 0",
        f"{source}: device GPU-3: resource b {{'x': 1}} is not a quantity; left out",
        f"{source}: device GPU-4: topology is not an object; left out",
        f"{source}: device GPU-4: status is not an object; left out",
    ]  # once each, though read twice
    # as upstream reports them: a minor that is not a number is 0; no topology and no
    # condition for a record without them
    entries = build_device_spec(None, [], found).devices
    assert [(d["id"], d["minor"], "topology" in d, "conditions" in d) for d in entries] == [
        ("GPU-3", 0, False, False),
        ("GPU-1", 1, False, False),
        ("GPU-4", 4, False, False),
    ]


# --- --xpu-enforce-collect-from-device-infos ----------------------------------------------------


@pytest.mark.parametrize(
    ("enforce", "records", "ids"),
    [
        pytest.param(False, [], ["GPU-00000000", "GPU-00000001"], id="nvml-when-no-records"),
        pytest.param(True, [], [], id="enforced-never-nvml"),
        pytest.param(True, [_nvidia("GPU-r", 0)], ["GPU-r"], id="enforced-records"),
    ],
)
def test_enforcing_device_infos_never_falls_back_to_nvml(enforce, records, ids) -> None:
    sources = DeviceSources(gpus=lambda: INVENTORY, records=lambda: records, enforce_device_infos=enforce)
    spec = sources.spec()
    assert [d["id"] for d in spec.devices] == ids
    if not ids:
        assert spec.labels == {}


# --- the driver version with device-info records ----------------------------------------------


@pytest.mark.parametrize(
    ("vendor", "inventory", "version"),
    [
        pytest.param("nvidia", INVENTORY, "535.104.05", id="nvidia"),
        pytest.param("huawei", INVENTORY, None, id="other-vendor"),
        pytest.param("nvidia", None, None, id="no-nvml"),
    ],
)
def test_nvidia_records_get_the_koordlets_driver_version(vendor, inventory, version) -> None:
    record = DeviceRecord(vendor, "A100-SXM4-80GB", "GPU-r", 0, {"koordinator.sh/gpu-core": "100"})
    spec = DeviceSources(gpus=lambda: inventory, records=lambda: [record]).spec()
    assert spec.labels.get("node.koordinator.sh/gpu-driver-version") == version
    assert spec.labels["node.koordinator.sh/gpu-vendor"] == vendor


# --- health: the Healthy condition --------------------------------------------------------------


def test_records_with_a_status_have_upstreams_healthy_condition() -> None:
    records = [
        _nvidia("GPU-a", 0),
        _nvidia("GPU-b", 1, healthy=False, err_code="Xid79", err_message="GPU has fallen off the bus"),
        _nvidia("GPU-c", 2, healthy=False, err_code="GPU is lost", err_message="NVML says so"),
        _nvidia("GPU-d", 3, healthy=False),
        _nvidia("GPU-e", 4, has_status=False),
    ]
    now = "2024-05-06T07:08:09Z"
    conditions = {d["id"]: d.get("conditions") for d in build_device_spec(None, [], records, now=now).devices}

    def healthy(status: str, reason: str, message: str) -> list[dict[str, str]]:
        return [
            {
                "type": "Healthy",
                "status": status,
                "lastTransitionTime": now,
                "reason": reason,
                "message": message,
            }
        ]

    assert conditions == {
        "GPU-a": healthy("True", "DeviceHealthy", "device is healthy"),
        "GPU-b": healthy("False", "Xid79", "GPU has fallen off the bus"),
        # a code the apiserver refuses as a reason is kept in the message
        "GPU-c": healthy("False", "Unknown", "GPU is lost: NVML says so"),
        "GPU-d": healthy("False", "Unknown", "device is unhealthy"),
        "GPU-e": None,
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    faults: dict[str, GPUFault] = {}
    clock = Clock()
    sources = DeviceSources(gpus=lambda: INVENTORY, faults=lambda: faults)
    async with validating_apiserver() as fake, fake.client() as client:
        reporter = DeviceReporter(client, "n1", node, sources, watch_gpu_health=None, clock=clock)

        def conditions() -> dict[str, Any]:
            return {d["id"]: d.get("conditions") for d in fake.get(res.DEVICES, "n1")["spec"]["devices"]}

        assert await reporter.sync() is True
        first = conditions()
        # NVML's healthy GPU has no condition, its unhealthy one (no fault known) says Unknown
        assert first["GPU-00000000"] is None
        assert first["GPU-00000001"][0]["reason"] == "Unknown"
        assert first["GPU-00000001"][0]["lastTransitionTime"] == "2023-11-14T22:13:20Z"
        clock.now += 60
        assert await reporter.sync() is False  # nothing changed but the time
        faults["0000:3b:00.0"] = GPUFault("Xid48", "Xid error detected on device, error code: 48")
        assert await reporter.sync() is True
        second = conditions()
        assert second["GPU-00000000"] == [
            {
                "type": "Healthy",
                "status": "False",
                "lastTransitionTime": "2023-11-14T22:14:20Z",
                "reason": "Xid48",
                "message": "Xid error detected on device, error code: 48",
            }
        ]
        assert second["GPU-00000001"] == first["GPU-00000001"]
        health = {d["id"]: d["health"] for d in fake.get(res.DEVICES, "n1")["spec"]["devices"]}
        assert health == {"GPU-00000000": False, "GPU-00000001": False}


# --- GPU partitions from p2pLinks ----------------------------------------------------------------


def _linked(minor: int, peers: str, link: str = "NVLink", **fields: Any) -> DeviceRecord:
    return _nvidia(f"GPU-{minor}", minor, p2p_links=(P2PLink(peers, link),), **fields)


def test_p2p_links_make_the_partition_table_and_policy() -> None:
    records = [
        _linked(0, "1,2,3"),
        _linked(1, "0,2,3"),  # the same four: once
        _linked(2, "3"),
        _linked(3, "2"),  # the same two: once
        _nvidia("GPU-4", 4, p2p_links=(P2PLink("5", "NVLink"), P2PLink("", "NVLink"), P2PLink("6", ""))),
        _nvidia("GPU-7", 7, p2p_links=(P2PLink("x,6", "HCCS"),)),
    ]
    spec = build_device_spec(None, [], records)
    assert spec.labels["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
    raw = spec.annotations["scheduling.koordinator.sh/gpu-partitions"]
    assert raw == (
        '{"2":[{"minors":[2,3],"gpuLinkType":"NVLink","allocationScore":1},'
        '{"minors":[4,5],"gpuLinkType":"NVLink","allocationScore":1},'
        '{"minors":[6,7],"gpuLinkType":"HCCS","allocationScore":1}],'
        '"4":[{"minors":[0,1,2,3],"gpuLinkType":"NVLink","allocationScore":1}]}'
    )
    assert json.loads(raw)["4"][0]["minors"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("first", "policy"),
    [
        pytest.param(_linked(0, "1", must_honor_partition=True), "Honor", id="must-honor"),
        pytest.param(_nvidia("GPU-0", 0, p2p_links=()), "Prefer", id="empty-links"),
        pytest.param(_nvidia("GPU-0", 0), None, id="no-links"),
    ],
)
def test_the_first_records_links_set_the_partition_policy(first, policy) -> None:
    spec = build_device_spec(None, [], [first, _linked(1, "0")])
    assert spec.labels.get("node.koordinator.sh/gpu-partition-policy") == policy


def test_records_without_links_have_no_partitions() -> None:
    spec = build_device_spec(None, [], [_nvidia("GPU-0", 0, p2p_links=()), _nvidia("GPU-1", 1)])
    assert spec.annotations == {}


def test_links_survive_the_file_and_an_empty_list_is_not_written(tmp_path: Path) -> None:
    linked = _linked(0, "1", must_honor_partition=True)
    plain = _nvidia("GPU-1", 1, p2p_links=())
    text = to_json([linked, plain])
    written = json.loads(text)
    assert written[0]["topology"]["p2pLinks"] == [{"peerMinor": "1", "type": "NVLink"}]
    assert written[0]["topology"]["mustHonorPartition"] is True
    # upstream's omitempty: no empty p2pLinks (it would label a partition policy) and no false
    assert "p2pLinks" not in written[1]["topology"]
    assert "mustHonorPartition" not in written[1]["topology"]
    assert from_json(text)[0] == linked


async def test_partitions_reach_the_device_object() -> None:
    sources = DeviceSources(records=lambda: [_linked(0, "1"), _linked(1, "0")])
    async with validating_apiserver() as fake, fake.client() as client:
        reporter = DeviceReporter(client, "n1", node, sources, watch_gpu_health=None)
        assert await reporter.sync() is True
        metadata = fake.get(res.DEVICES, "n1")["metadata"]
    assert json.loads(metadata["annotations"]["scheduling.koordinator.sh/gpu-partitions"]) == {
        "2": [{"minors": [0, 1], "gpuLinkType": "NVLink", "allocationScore": 1}]
    }
    assert metadata["labels"]["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
