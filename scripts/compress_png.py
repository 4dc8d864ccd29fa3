#!/usr/bin/env python3
"""``make screenshots``' last step: every PNG under the given folders to a 256-colour palette
(Pillow's fast octree quantizer, no dithering: flat UI colours stay flat), saved optimized, so the
README's pictures stay a few megabytes in the repository. Prints each file's size before and after.

    python scripts/compress_png.py docs/screenshots
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image


def compress(path: Path) -> tuple[int, int]:
    before = path.stat().st_size
    with Image.open(path) as image:
        if image.mode == "P":
            return before, before  # already a palette: compressed by an earlier run
        rgb = image.convert("RGB")
    small = rgb.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    small.save(path, optimize=True)
    return before, path.stat().st_size


def main(folders: list[str]) -> int:
    total_before = total_after = 0
    for folder in folders:
        for path in sorted(Path(folder).glob("*.png")):
            before, after = compress(path)
            total_before += before
            total_after += after
            print(f"{path}: {before / 1024:.0f} KiB -> {after / 1024:.0f} KiB")
    print(f"in all: {total_before / 1024:.0f} KiB -> {total_after / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["docs/screenshots"]))
