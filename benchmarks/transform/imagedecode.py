"""PIL one object at a time vs tfbatch's TensorFlow batch decoder, for a [None, 64, 64, 3] input.

The no-script path for an image-tensor signature used to decode each body with PIL
(open, convert to RGB, BILINEAR resize, / 255) on the object's own thread; it now goes
through ``tfbatch.records.imagedecode``. This runs both on the same in-memory JPEGs
(~22 KB each, real photos from benchmarks/common/dataset.py), in one process, rounds
interleaved, and reports for each contender:

- images/s (median of the rounds) and its ratio to PIL one object at a time;
- CPU ms per image (this process, all threads);
- how far a pure-Python thread gets while the contender runs, as a share of what it
  gets alone: the room left for the thread that feeds the model (the GIL's share).

    python -m benchmarks.transform.imagedecode --images 2000 --rounds 3 --out benchmarks/transform
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

SIZE = 64


def make_bodies(count: int, seed: int = 0) -> list[bytes]:
    from benchmarks.common.dataset import make_jpeg

    return [make_jpeg(seed, i, min_bytes=18 * 1024, max_bytes=26 * 1024)[0] for i in range(count)]


def pil_one(body: bytes) -> np.ndarray:
    """The decode the no-script path did before (handlers/defaults.py, PIL)."""
    from PIL import Image

    with Image.open(io.BytesIO(body)) as img:
        image = np.asarray(img.convert("RGB"))
    if image.shape[:2] != (SIZE, SIZE):
        image = np.asarray(Image.fromarray(image).resize((SIZE, SIZE), Image.BILINEAR))
    return (image.astype(np.float32) / 255.0)[np.newaxis]


def contenders(batch: int, workers: int):
    from tfbatch.records.imagedecode import ImageDecoder, ImageTarget

    decoder = ImageDecoder(ImageTarget(SIZE, SIZE, 3, "float32"), workers=workers)
    pool = ThreadPoolExecutor(workers)

    def pil_serial(bodies):
        return np.concatenate([pil_one(b) for b in bodies])

    def pil_threads(bodies):  # what the per-object pipeline's threads gave PIL
        return np.concatenate(list(pool.map(pil_one, bodies, chunksize=8)))

    def tf_batches(bodies):
        parts = [decoder.decode(bodies[i:i + batch]) for i in range(0, len(bodies), batch)]
        assert not any(p.errors for p in parts)
        return np.concatenate([p.array for p in parts])

    def tf_one_by_one(bodies):  # the endpoint: one request, one image
        return np.concatenate([decoder.decode_one(b) for b in bodies])

    return {
        "pil_per_object": pil_serial,
        f"pil_per_object_{workers}_threads": pil_threads,
        f"tf_decoder_batches_of_{batch}": tf_batches,
        "tf_decoder_per_object": tf_one_by_one,
    }


class Counter:
    """A pure-Python loop on its own thread: its rate is what the GIL leaves to Python."""

    def __init__(self):
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            for _ in range(1000):
                self.count += 1

    def __enter__(self):
        self.started = time.perf_counter()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.rate = self.count / (time.perf_counter() - self.started)


def python_share(fn, bodies) -> float:
    with Counter() as alone:
        time.sleep(0.5)
    with Counter() as beside:
        fn(bodies)
    return beside.rate / alone.rate


def run(args) -> dict:
    bodies = make_bodies(args.images)
    workers = args.workers or len(os.sched_getaffinity(0))
    fns = contenders(args.batch, workers)
    outputs = {name: fn(bodies[:args.batch]) for name, fn in fns.items()}  # warm-up, trace
    reference = fns["pil_per_object"](bodies)
    rounds: dict[str, list[dict]] = {name: [] for name in fns}
    for r in range(args.rounds):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for name in order:
            cpu, wall = time.process_time(), time.perf_counter()
            outputs[name] = fns[name](bodies)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rounds[name].append({"img_per_s": len(bodies) / wall, "cpu_ms_per_img": 1000 * cpu / len(bodies)})
    sample = bodies[: min(len(bodies), 500)]
    results = {}
    for name in fns:
        rates = [x["img_per_s"] for x in rounds[name]]
        diff = np.abs(np.round(outputs[name].astype(np.float64) * 255) - np.round(reference * 255.0))
        results[name] = {
            "img_per_s_median": statistics.median(rates),
            "img_per_s_rounds": rates,
            "cpu_ms_per_img_median": statistics.median(x["cpu_ms_per_img"] for x in rounds[name]),
            "python_thread_share": python_share(fns[name], sample),
            "max_levels_from_pil": float(diff.max()),
            "pixels_off_pil": float((diff > 0.5).mean()),
        }
    base = results["pil_per_object"]["img_per_s_median"]
    for item in results.values():
        item["ratio_vs_pil_per_object"] = item["img_per_s_median"] / base
    sizes = [len(b) for b in bodies]
    return {
        "images": len(bodies), "mean_bytes": statistics.mean(sizes), "target": [SIZE, SIZE, 3],
        "batch": args.batch, "workers": workers, "rounds": args.rounds, "cpus": os.cpu_count(),
        "load_before": os.getloadavg(), "python": platform.python_version(), "results": results,
        "note": args.note,
    }


def markdown(data: dict) -> str:
    lines = [
        "# Image decode for a [None, 64, 64, 3] float input: PIL per object vs the TensorFlow decoder",
        "",
        f"`python -m benchmarks.transform.imagedecode --images {data['images']} --rounds {data['rounds']}` "
        f"({data['images']} JPEGs, mean {data['mean_bytes'] / 1024:.1f} KB, real photos; batches of "
        f"{data['batch']}, {data['workers']} shards/threads; {data['cpus']} CPUs; load average before "
        f"{data['load_before'][0]:.2f}; {data['note']})",
        "",
        "| contender | img/s (median) | rounds | vs PIL per object | CPU ms/img | Python thread's share | max levels from PIL | pixels off PIL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in data["results"].items():
        lines.append(
            f"| {name} | {r['img_per_s_median']:.0f} | {', '.join(f'{x:.0f}' for x in r['img_per_s_rounds'])} | "
            f"{r['ratio_vs_pil_per_object']:.2f}x | {r['cpu_ms_per_img_median']:.2f} | "
            f"{r['python_thread_share']:.0%} | {r['max_levels_from_pil']:.0f} | {r['pixels_off_pil']:.3%} |"
        )
    lines += [
        "",
        "\"Python thread's share\": the rate of a pure-Python loop on another thread while the contender",
        "decodes 500 images, over its rate alone: what is left for the thread that feeds the model.",
        "\"levels\": differences on the 0..255 scale against PIL per object, over all pixels.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="shards / threads (default: CPUs)")
    parser.add_argument("--note", default="2-core VM shared with other work")
    parser.add_argument("--out", default=None, help="folder for imagedecode.json and imagedecode.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    data = run(args)
    text = markdown(data)
    print(text)
    if args.out:
        out = Path(args.out)
        (out / "imagedecode.json").write_text(json.dumps(data, indent=2) + "\n")
        (out / "imagedecode.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
