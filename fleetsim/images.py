"""The image store: image references resolved to unpacked package folders. Reads files only.

A store is a folder. Its optional `index.json` maps references to folders (relative to the store):
`{"images": {"registry.example/nvidia/driver:550.1": "driver-550"}}`. Without an entry, a reference
`<anything>/<name>:<tag>` resolves to `<store>/<name>/<tag>/` if it exists, else `<store>/<name>/`;
so `example.local/sysctl-tuning:1.0.0` resolves to `deploy/examples/packages/sysctl-tuning`.
A folder qualifies only if it holds a config.json (NodeWright's `skyhook-package/` layout too).
"""

from __future__ import annotations

import json
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "deploy" / "examples" / "packages"


def split_reference(image: str) -> tuple[str, str]:
    """(`name`, `tag`) of an image reference: last path segment and tag (`latest` when none). Pure."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    name, _, tag = last.partition(":")
    return name, tag or "latest"


class ImageStore:
    """Ordered list of store folders; the first that resolves a reference wins."""

    def __init__(self, stores: list[Path], include_examples: bool = True) -> None:
        self.stores = [Path(s) for s in stores]
        if include_examples and EXAMPLES_DIR not in self.stores:
            self.stores.append(EXAMPLES_DIR)

    def resolve(self, image: str) -> Path | None:
        """The package folder for an image reference, or None (the pod gets ErrImagePull)."""
        name, tag = split_reference(image)
        for store in self.stores:
            for candidate in self._candidates(store, image, name, tag):
                for folder in (candidate, candidate / "noderoll-package", candidate / "skyhook-package"):
                    if (folder / "config.json").is_file():
                        return folder
        return None

    @staticmethod
    def _candidates(store: Path, image: str, name: str, tag: str) -> list[Path]:
        found: list[Path] = []
        index = store / "index.json"
        if index.is_file():
            try:
                images = json.loads(index.read_text(encoding="utf-8")).get("images", {})
            except (OSError, ValueError, AttributeError):
                images = {}
            if isinstance(images, dict) and image in images:
                found.append(store / str(images[image]))
        found += [store / name / tag, store / name]
        return found
