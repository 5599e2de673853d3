"""OCI image archives built from a folder, without a registry or a container engine. Writes files.

The real-node tier needs images in containerd's store on a machine with no Docker and no registry:
a root filesystem assembled from this machine's Debian packages (`localstack.rootfs`) becomes a
one-layer OCI image layout archive (`oci-layout`, `index.json`, `blobs/sha256/...`) that
`ctr images import` loads. The layer is an uncompressed, reproducible tar (sorted entries, owner
root, fixed times), so the same folder always gives the same image digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
# A fixed time for every entry and the image: reproducible digests (2020-01-01T00:00:00Z).
EPOCH = 1577836800
CREATED = "2020-01-01T00:00:00Z"


@dataclass(frozen=True)
class ImageSpec:
    """What an image runs: its name and its process defaults."""

    reference: str  # e.g. example.local/nodewright-tuning:1.0.0
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    workdir: str = "/"
    user: str = "0:0"


def _entries(rootfs: Path) -> list[Path]:
    paths: list[Path] = []
    for folder, dirs, files in os.walk(rootfs):
        dirs.sort()
        base = Path(folder)
        paths += [base / name for name in sorted([*dirs, *files])]
    return paths


def layer_tar(rootfs: Path) -> bytes:
    """The folder as one reproducible, uncompressed tar layer."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _entries(rootfs):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = EPOCH
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def image_config(spec: ImageSpec, diff_id: str) -> dict[str, Any]:
    """The OCI image configuration (pure)."""
    config: dict[str, Any] = {"Env": spec.env, "WorkingDir": spec.workdir, "User": spec.user}
    if spec.entrypoint:
        config["Entrypoint"] = spec.entrypoint
    if spec.cmd:
        config["Cmd"] = spec.cmd
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": CREATED, "created_by": "noderoll localstack.oci"}],
    }


def write_archive(rootfs: Path, spec: ImageSpec, out: Path) -> str:
    """Write the OCI image layout archive of `rootfs` to `out`; returns the manifest digest."""
    blobs: dict[str, bytes] = {}
    layer = layer_tar(rootfs)
    layer_ref = {"mediaType": MEDIA_LAYER, **_blob(blobs, layer)}
    config = json.dumps(image_config(spec, layer_ref["digest"]), sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, **_blob(blobs, config)},
        "layers": [layer_ref],
    }
    manifest_ref = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    tag = spec.reference.rsplit(":", 1)[-1] if ":" in spec.reference.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST, **manifest_ref,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": spec.reference, "org.opencontainers.image.ref.name": tag},
        }],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as tar:
        for name, data in [("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                           ("index.json", json.dumps(index, sort_keys=True).encode()),
                           *((f"blobs/sha256/{d.split(':', 1)[1]}", b) for d, b in sorted(blobs.items()))]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))
    return str(manifest_ref["digest"])
