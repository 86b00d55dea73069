"""Serving throughput from many threads: lite's ModelParallelRunner (workers sharing one copy of the weights) and a
shared lite Model beside ONNX Runtime's shared InferenceSession, and what each costs in memory.

    python -m benchmarks.model_pool [--models resnet50 bert_base] [--rounds 5] [--requests 16]
                                    [--out benchmarks/results/model_pool.md]

How it measures:
- Throughput: one process per engine and model. Every configuration is built once, then `rounds` times, in a turning
  order, `clients` client threads (2 here: one per core) send `requests` predicts in total as fast as answers come;
  throughput = requests / wall time; the table gives the median over rounds. Each worker / session runs one thread
  (thread_num = intra_op_num_threads = 1), so two workers can use the two cores.
  lite: a runner of 1 worker, a runner of 2 workers, one shared Model (predicts serialised);
  ONNX Runtime: one session (Run is thread safe) called by 1 client and by 2 clients.
- Memory: a fresh process per configuration measures its resident set (VmRSS) after building and a predict on every
  worker, less its resident set once the engine is imported: what the configuration holds (weights, packed copies,
  activation memory, threads).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks.compare import CACHE, MODELS, convert, random_feeds
from benchmarks.machine import cpu_name
from benchmarks.results_io import write_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _lite_runner(path: str, workers: int):
    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = workers
    runner = lite.ModelParallelRunner()
    runner.build_from_file(path, ctx)
    return runner


def _lite_model(path: str):
    import lite
    model = lite.Model()
    model.build_from_file(path)
    return model


def _ort_session(path: str):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _throughput(run, feeds: dict, clients: int, requests: int) -> float:
    """Requests per second with `clients` threads sharing `requests` predicts."""
    left = [requests]
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            run(feeds)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return requests / (time.perf_counter() - t0)


def _throughput_worker(engine: str, path: str, feeds_path: str, rounds: int, requests: int) -> None:
    sys.path.insert(0, ROOT)
    feeds = dict(np.load(feeds_path))
    configs: dict[str, tuple] = {}
    if engine == "lite":
        one, two, shared = _lite_runner(path, 1), _lite_runner(path, 2), _lite_model(path)
        configs["lite runner, 1 worker"] = (lambda f: one.predict(f), 2)
        configs["lite runner, 2 workers"] = (lambda f: two.predict(f), 2)
        configs["lite shared Model"] = (lambda f: shared.predict(f), 2)
    else:
        sess = _ort_session(path)
        configs["ORT session, 1 client"] = (lambda f: sess.run(None, f), 1)
        configs["ORT session, 2 clients"] = (lambda f: sess.run(None, f), 2)
    names = list(configs)
    for run, _ in configs.values():   # warm every worker
        for _ in range(4):
            run(feeds)
    results: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            run, clients = configs[n]
            results[n].append(_throughput(run, feeds, clients, requests))
            time.sleep(0.2)
    print(json.dumps(results))


def _memory_worker(config: str, path: str, onnx_path: str, feeds_path: str) -> None:
    sys.path.insert(0, ROOT)
    feeds = dict(np.load(feeds_path))
    if config.startswith("ort"):
        import onnxruntime  # noqa: F401 - its libraries count in the baseline
        before = _rss_mb()
        sess = _ort_session(onnx_path)
        sess.run(None, feeds)
        sess.run(None, feeds)
    else:
        import lite  # noqa: F401
        before = _rss_mb()
        kind, n = config.split(":")
        if kind == "runner":
            runner = _lite_runner(path, int(n))
            for _ in range(2 * int(n)):   # every worker runs
                runner.predict(feeds)
        else:
            models = [_lite_model(path) for _ in range(int(n))]
            for m in models:
                m.predict(feeds)
    print(json.dumps({"grown_mb": _rss_mb() - before}))


def _spawn(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.model_pool", *args], capture_output=True, text=True,
                         cwd=ROOT, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["resnet50", "bert_base"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--out", default="")
    ap.add_argument("--throughput-worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--memory-worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.throughput_worker:
        engine, path, feeds, rounds, requests = a.throughput_worker
        return _throughput_worker(engine, path, feeds, int(rounds), int(requests))
    if a.memory_worker:
        return _memory_worker(*a.memory_worker)

    import onnxruntime as ort
    sys.path.insert(0, ROOT)
    import lite
    os.makedirs(CACHE, exist_ok=True)
    rows, mem_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for key in a.models:
            title, build = MODELS[key]
            onnx_path = os.path.join(tmp, f"{key}.onnx")
            shapes = build(onnx_path)
            ms_path = convert(onnx_path, os.path.join(tmp, key), shapes)
            feeds_path = os.path.join(tmp, f"{key}_feeds.npz")
            np.savez(feeds_path, **random_feeds(shapes, 0))
            print(f"{title}: throughput", flush=True)
            tput = {}
            tput.update(_spawn(["--throughput-worker", "lite", ms_path, feeds_path, str(a.rounds), str(a.requests)]))
            tput.update(_spawn(["--throughput-worker", "ort", onnx_path, feeds_path, str(a.rounds), str(a.requests)]))
            med = {k: statistics.median(v) for k, v in tput.items()}
            print(f"{title}: memory", flush=True)
            mem = {c: _spawn(["--memory-worker", c, ms_path, onnx_path, feeds_path])["grown_mb"]
                   for c in ("models:1", "runner:1", "runner:2", "runner:4", "models:2", "ort:1")}
            weights_mb = os.path.getsize(ms_path) / 2**20
            one, two = med["lite runner, 1 worker"], med["lite runner, 2 workers"]
            ort1, ort2 = med["ORT session, 1 client"], med["ORT session, 2 clients"]
            rows.append(f"| {title} | {one:.2f} | {two:.2f} | **{two / one:.2f}x** | {med['lite shared Model']:.2f} | "
                        f"{ort1:.2f} | {ort2:.2f} | {ort2 / ort1:.2f}x | {two / ort2:.2f} |")
            mem_rows.append(f"| {title} | {weights_mb:.1f} | {mem['models:1']:.1f} | {mem['runner:1']:.1f} | "
                            f"{mem['runner:2']:.1f} | "
                            f"{mem['runner:4']:.1f} | {mem['models:2']:.1f} | {mem['ort:1']:.1f} |")
            print(rows[-1], mem_rows[-1], sep="\n", flush=True)
    head = (f"# Serving from many threads: lite's ModelParallelRunner beside ONNX Runtime's shared session\n\n"
            f"{cpu_name()}, {os.cpu_count()} CPUs; lite {lite.__version__}, onnxruntime {ort.__version__}; "
            f"{time.strftime('%Y-%m-%d')}. `python -m benchmarks.model_pool --rounds {a.rounds} --requests "
            f"{a.requests}`. One thread per worker / session (thread_num = intra_op_num_threads = 1); 2 client "
            f"threads send {a.requests} predicts a round; throughput in requests/s, the median of {a.rounds} rounds "
            "(configurations in a turning order).\n\n"
            "| model | runner 1 worker | runner 2 workers | scaling | shared Model, 2 clients | ORT session 1 client "
            "| ORT session 2 clients | ORT scaling | lite 2 workers / ORT 2 clients |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    mem_head = ("\nMemory (MB): resident set a configuration adds after building and a predict on every worker, beside "
                "the .ms file's size (its weights). Workers share the file mapping and every packed weight: N workers "
                "cost one model plus N activation arenas; separate Models each pack their own copy.\n\n"
                "| model | .ms file | one Model | runner 1 worker | runner 2 workers | runner 4 workers | 2 separate Models "
                "| ORT session |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
    text = head + "\n".join(rows) + "\n" + mem_head + "\n".join(mem_rows) + "\n"
    print(text)
    if a.out:
        write_table(a.out, text)


if __name__ == "__main__":
    main()
