"""The GPU box's one command: install the project offline, run the GPU tests, then the GPU benchmark.

    on a connected machine, in this checkout (the box's list first: python3 -m pip list --format=freeze > box.txt):
        make wheelhouse PRESENT_FROM=box.txt TARGET_PYTHON=3.12       # → wheelhouse/ (pytest included)
    copy the checkout with its wheelhouse/ to the box; there, in it, with the Python that has the CUDA torch:
        python3 deploy/gpu_check.py                                   # or: make gpu-check GPU_PY=python3

Steps, each recorded and none stopping the next (only a missing CUDA GPU stops it at once: one line, exit 2):
  install  `python -m pip install --no-index --find-links wheelhouse --require-hashes -r
           wheelhouse/requirements.txt` into that Python (the README's offline install; nothing is fetched)
  tests    `python -m pytest tests/gpu -m gpu` with SWARM_REQUIRE_GPU=1 (a missing GPU is an error there)
  bench    `python -m bench.speed.gpu`, every scenario in a process of its own (one that fails or runs out of
           memory is recorded as such, the others still run; the reference `hf-generate` last) →
           bench/results/speed/gpu.json (`--quick`: gpu_quick.json; gpu.json is never written by it)
then `<out>/gpu-check-logs.tar.gz`: every step's log, the tests' JUnit XML, the benchmark's per-scenario logs
and result, `summary.json` (each step's status and seconds, the versions, nvidia-smi) — small enough to send
back. It aims at 8 minutes on an H100/H200: the tests get at most `--tests-timeout` seconds and each bench
scenario its share of what is left of `--budget` (at least 90 s). The exit status is 0 when every step passed,
else 1.

`--dry-run` does the same on this CPU, to check the command itself: the install from the wheelhouse (into the
running Python: run it from a virtualenv made for the purpose), the GPU tests collected (they need a GPU to
run), and the bench's scenarios on the tiny model at a tiny size, each in its own process, into
`<out>/gpu_dry.json` (bench/results is not touched). `--no-install` skips the install (the project is there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRY_BENCH = ["--device", "cpu", "--model", "tiny", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8"]


def say(text: str) -> None:
    print(f"gpu-check: {text}", flush=True)


def run_step(name: str, cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> dict:
    """Run `cmd` from the checkout's root, its output into `log`; its status (ok | failed | timed out) and seconds."""
    say(f"{name}: {' '.join(cmd)} (log {log.name}, at most {timeout:.0f} s)")
    t0 = time.perf_counter()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = None
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    status = "timed out" if rc is None else "ok" if rc == 0 else "failed"
    step = {"step": name, "status": status, "exit": rc, "seconds": round(time.perf_counter() - t0, 1),
            "last_line": lines[-1][:300] if lines else ""}
    say(f"{name}: {status} in {step['seconds']:.0f} s — {step['last_line']}")
    return step


def cuda_line(python: str) -> str | None:
    """None when torch in `python` sees a CUDA GPU, else the one line saying what it sees."""
    probe = ("import torch; print(torch.__version__, torch.version.cuda, int(torch.cuda.is_available()), "
             "torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')")
    got = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if got.returncode != 0:
        return f"torch does not import in {python}: {(got.stderr.strip().splitlines() or [''])[-1]}"
    version, cuda, seen, *_ = got.stdout.split() + ["", "", ""]
    if seen != "1":
        return f"no CUDA GPU visible to torch {version} in {python} (CUDA build: {cuda}); nothing was run"
    return None


def versions(python: str) -> dict:
    probe = ("import json, importlib.metadata as md, torch; print(json.dumps({**{n: md.version(n) for n in "
             "('torch', 'transformers', 'peft', 'rlswarm-node')}, 'cuda': torch.version.cuda, 'device': "
             "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}))")
    got = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd="/")
    try:
        return json.loads(got.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (got.stderr.strip().splitlines() or ["?"])[-1][:300]}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheelhouse", type=Path, default=ROOT / "wheelhouse", help="the folder make wheelhouse wrote")
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-check", help="logs, summary and the tarball go here")
    ap.add_argument("--no-install", action="store_true", help="the project and pytest are installed already")
    ap.add_argument("--dry-run", action="store_true", help="on this CPU: install, collect the tests, a tiny bench")
    ap.add_argument("--quick", action="store_true", help="bench 4 × 8 × 64 tokens, into gpu_quick.json")
    ap.add_argument("--scenarios", nargs="+", default=None, help="bench only these (bench.speed.gpu's names)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check (default 8 minutes)")
    ap.add_argument("--tests-timeout", type=float, default=180.0, help="seconds the GPU tests may take")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    python, started = sys.executable, time.perf_counter()
    deadline = started + args.budget
    if not args.dry_run and (why := cuda_line(python)):
        print(f"gpu-check: {why}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    steps = []
    if not args.no_install:
        reqs = args.wheelhouse / "requirements.txt"
        if not reqs.is_file():
            print(f"gpu-check: no {reqs}: build it on a connected machine (make wheelhouse PRESENT_FROM=box.txt) "
                  "and copy it here, or pass --no-install", file=sys.stderr)
            return 2
        steps.append(run_step("install", [python, "-m", "pip", "install", "--no-index", "--find-links",
                                          str(args.wheelhouse), "--require-hashes", "-r", str(reqs)],
                              out / "install.log", max(60.0, deadline - time.perf_counter()), env))
    tests = [python, "-m", "pytest", "tests/gpu", "-m", "gpu", "-p", "no:cacheprovider", "-rA",
             f"--junitxml={out / 'tests.xml'}"]
    if args.dry_run:  # the tests need a GPU: collecting them imports everything they use
        tests += ["--collect-only", "-q"]
    steps.append(run_step("tests", tests, out / "tests.log", min(args.tests_timeout, deadline - time.perf_counter()),
                          {**env, **({} if args.dry_run else {"SWARM_REQUIRE_GPU": "1"})}))
    result = out / "gpu_dry.json" if args.dry_run else None
    bench = [python, "-m", "bench.speed.gpu", "--logs", str(out / "bench")]
    bench += [*DRY_BENCH, "--out", str(result)] if args.dry_run else ["--quick"] if args.quick else []
    if args.scenarios:
        bench += ["--scenarios", *args.scenarios]
    scenarios = args.scenarios or ["full-bf16", "fp32-autocast", "lora", "vllm", "hf-generate"]
    has_vllm = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
                              capture_output=True, text=True).stdout.strip() == "True"
    n = len([s for s in scenarios if s != "vllm" or has_vllm])  # bench.speed.gpu skips vllm where it is absent
    per = max(90, int((deadline - time.perf_counter() - 15) / max(n, 1)))  # each its share of what is left
    bench += ["--scenario-timeout", str(per)]
    steps.append(run_step("bench", bench, out / "bench.log", n * per + 60.0, env))
    if result is None:
        result = ROOT / "bench" / "results" / "speed" / ("gpu_quick.json" if args.quick else "gpu.json")
        if steps[-1]["exit"] is None or not result.is_file() or result.stat().st_mtime < started_wall(started):
            result = None
    summary = {"steps": steps, "seconds": round(time.perf_counter() - started, 1), "dry_run": args.dry_run,
               "python": python, "platform": platform.platform(), "versions": versions(python),
               "nvidia_smi": _nvidia_smi(), "result": str(result) if result else None}
    if result is not None:
        bench_out = json.loads(result.read_text())
        summary["scenarios"] = {r["name"]: r["status"] for r in bench_out.get("scenarios", [])}
        if result.parent != out:
            shutil.copy(result, out / result.name)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    tarball = out / "gpu-check-logs.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path != tarball:
                tar.add(path, arcname=str(path.relative_to(out.parent)))
    ok = all(s["status"] == "ok" for s in steps)
    say(f"{'passed' if ok else 'NOT passed'}: " + ", ".join(f"{s['step']} {s['status']}" for s in steps)
        + f" in {summary['seconds']:.0f} s; " + (f"results {result}; " if result else "no results; ")
        + f"logs {tarball} ({tarball.stat().st_size / 1024:.0f} KiB)")
    return 0 if ok else 1


def started_wall(started_perf: float) -> float:
    """The wall-clock time at which perf_counter read `started_perf`."""
    return time.time() - (time.perf_counter() - started_perf)


def _nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    got = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
    return got.stdout[-4000:] if got.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
