"""Milliseconds per FB update on a GPU, and why: batch sizes, bf16, CUDA graphs, a profile.

    python benchmarks/fb_update_cuda.py [--preset paper] [--batches 512 2048] [--tf32]

For each batch size, rbfm's update (`FBTrainer.update`, cheetah-sized inputs) timed
with fp32 or bf16 networks, eager or replayed as one CUDA graph (`rbfm pretrain
--cuda-graph`), after a warm-up, the device synchronised; `--tf32` allows TF32 matrix
products. Then one eager update profiled at the preset's batch: the GPU kernels it
launches and the time the GPU is busy. Where the time per update barely changes with
the batch size and the GPU is busy for a fraction of it, the update is bound by the
host's kernel launches, not by the GPU's arithmetic (docs/benchmarks.md, "Where a GPU
update's time goes").
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from fb_update import _batch
from rbfm.fb import FBModel, FBTrainer, fb_config


def _ms_per_update(trainer: FBTrainer, batch: dict[str, torch.Tensor], updates: int) -> float:
    for _ in range(20):
        trainer.update(batch)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(updates):
        trainer.update(batch)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / updates * 1000


def _profile(trainer: FBTrainer, batch: dict[str, torch.Tensor], updates: int = 10) -> None:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(updates):
            trainer.update(batch)
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    kernels = sum(e.count for e in events) / updates
    busy = sum(e.self_device_time_total for e in events) / updates / 1000
    print(f"per update: {kernels:.0f} GPU kernels, GPU busy {busy:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--batches", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matrix products")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("fb_update_cuda.py needs a CUDA device (benchmarks/fb_update.py: CPU)")
    device = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; {args.preset} preset")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    print("batch  precision  eager ms  graph ms")
    for size in args.batches:
        for bf16 in (False, True):
            cfg = fb_config(args.preset, bf16=bf16, batch_size=size)
            ms = [
                _ms_per_update(
                    FBTrainer(FBModel(17, 6, cfg).to(device), seed=0, cuda_graph=graph),
                    _batch(size, 0, device),
                    args.updates,
                )
                for graph in (False, True)
            ]
            precision = "bf16" if bf16 else "fp32"
            print(f"{size:>5}  {precision:>9}  {ms[0]:8.2f}  {ms[1]:8.2f}", flush=True)
    cfg = fb_config(args.preset)
    trainer = FBTrainer(FBModel(17, 6, cfg).to(device), seed=0)
    batch = _batch(cfg.batch_size, 0, device)
    _ms_per_update(trainer, batch, 20)
    _profile(trainer, batch)


if __name__ == "__main__":
    main()
