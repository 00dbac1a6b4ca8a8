"""The Device object the koordlet reports: entries, labels and topology built from NVML's
GPUs, sysfs's RDMA devices and koord-device-daemon's records (upstream's
``states_device_linux.go``), and the reporter writing it only when it changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from koordinator.kube import resources as res
from koordlet.statesinformer.device import DeviceReporter, DeviceSources, build_device_spec
from koordlet.system.devices.nvml import GPUInfo, GPUInventory
from koordlet.system.devices.rdma import RDMADevice, VirtualFunction
from koordlet.system.devices.xpu import DeviceRecord, from_json, read_dir, to_json, write_atomically
from testsupport.fake import FakeApiServer

CRDS = Path(__file__).resolve().parents[3] / "crds"
GI = 1024**3


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
