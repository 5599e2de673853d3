"""Locally built images for the real-node tier (localstack.oci, localstack.node_images): valid, reproducible."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from localstack import node_images, oci, realnode
from localstack.rootfs import BUSYBOX
from tests.helpers.packages import NODEWRIGHT_IMAGE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _busybox() -> None:
    """The images are busybox-based: install busybox-static when missing, as the real-node tier does.

    These tests used to skip without it, and in a two-process run they ran before or after the
    real-node tier had installed it: two skips came and went unnoticed (issue #24).
    """
    try:
        realnode.install_packages({str(BUSYBOX): "busybox-static"})
    except realnode.RealNodeError as err:
        pytest.skip(f"{BUSYBOX} missing and not installable: {err}")


def _read(archive: Path) -> tuple[dict, dict, dict, tarfile.TarFile]:
    outer = tarfile.open(archive)
    blob = lambda digest: outer.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}").read()  # noqa: E731
    index = json.loads(outer.extractfile("index.json").read())
    manifest = json.loads(blob(index["manifests"][0]["digest"]))
    config = json.loads(blob(manifest["config"]["digest"]))
    layer = tarfile.open(fileobj=__import__("io").BytesIO(blob(manifest["layers"][0]["digest"])))
    return index, manifest, config, layer


def test_a_nodewright_style_package_image(tmp_path: Path) -> None:
    folder = REPO / "deploy/examples/packages/nodewright-tuning/skyhook-package"
    archive = node_images.package_image(tmp_path, NODEWRIGHT_IMAGE, folder)
    index, manifest, config, layer = _read(archive)
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == NODEWRIGHT_IMAGE
    assert manifest["layers"][0]["mediaType"] == oci.MEDIA_LAYER
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    names = set(layer.getnames())
    assert {"bin/busybox", "bin/sh", "bin/cp", "skyhook-package/config.json", "skyhook-package/skyhook_dir/tune.sh"} <= names
    assert layer.getmember("bin/sh").issym() and layer.getmember("bin/sh").linkname == "busybox"
    assert all(m.uid == 0 and m.mtime == oci.EPOCH for m in layer.getmembers())


def test_the_same_folder_gives_the_same_image(tmp_path: Path) -> None:
    first = node_images.pause_image(tmp_path / "a", "noderoll.local/pause:1")
    second = node_images.pause_image(tmp_path / "b", "noderoll.local/pause:1")
    assert _read(first)[0] == _read(second)[0]
    assert _read(first)[2]["config"]["Entrypoint"] == node_images.PAUSE_COMMAND
