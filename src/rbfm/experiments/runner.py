"""The experiment driver: plan, run the missing cells stage by stage, store each finished
cell atomically, and assemble the results tables.

Run directory:
    spec.json                 the spec as run (the last run's)
    demos/<id>.npz            expert demonstrations per (model, task)
    policies/<id>.json        task vectors; baselines: <id>.safetensors + <id>.json
    cells/infer/<id>.json     per inference: seconds, steps, policy file
    cells/eval/<id>.json      per evaluation: the results row and the episodes' returns
    cells/ceiling/<id>.json   per expert evaluation: the expert's returns
    cells/certificate/<id>.json  per inference (certificate_steps > 0): its certificates
    results.csv               one row per evaluation cell of the spec (rbfm.experiments.table)
    certificates.csv          per inference and radius: nominal and worst-case loss

Every file is written to a temporary name and renamed, and a cell's record is written
after its outputs, so a run killed at any moment keeps every finished cell and nothing
half-written; run again, it skips what is done and computes only the rest.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from rbfm.atomic import atomic_csv, atomic_write
from rbfm.data.demos import Demos, load_demos, save_demos
from rbfm.experiments.executors import Executor
from rbfm.experiments.jobs import (
    AdaptJob,
    AdaptTask,
    BaselineState,
    CertJob,
    DemosJob,
    EvalEntry,
    EvalJob,
    InferJob,
    InferOutput,
    run_adapt,
    run_cert,
    run_demos,
    run_eval,
    run_infer,
)
from rbfm.experiments.plan import (
    NOMINAL,
    AdaptCell,
    CeilingCell,
    CertCell,
    DemosCell,
    EvalCell,
    InferCell,
    Plan,
    plan,
)
from rbfm.experiments.spec import ExperimentSpec
from rbfm.experiments.table import (
    CeilingRow,
    CertificateRow,
    ResultRow,
    write_ceiling_table,
    write_certificate_table,
    write_table,
)
from rbfm.methods import BASELINE_METHODS

# Episodes per evaluation job (`rbfm experiment --eval-batch`). Each episode's environment
# is a copy of one physics loaded per process: the `grid` stages ran 400-episode jobs with
# workers peaking at 1.6-2.0 GB (quadruped; before the copies a 400-episode walker job
# took 5-7 GB), and a larger batch makes fewer actor calls per step of the grid.
EVAL_BATCH = 400


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1)
    atomic_write(path, lambda tmp: tmp.write_text(text))


class Store:
    """The run directory: where each cell's outputs and record live."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def demos(self, cell: DemosCell) -> Path:
        return self.root / "demos" / f"{cell.id}.npz"

    def policy(self, cell: InferCell) -> Path:
        return self.root / "policies" / cell.id  # a stem

    def infer_record(self, cell: InferCell) -> Path:
        return self.root / "cells" / "infer" / f"{cell.id}.json"

    def adapt_record(self, cell: AdaptCell) -> Path:
        return self.root / "cells" / "adapt" / f"{cell.id}.json"

    def adapted_policy(self, cell: AdaptCell, budget: int) -> Path:
        return self.root / "policies" / f"{cell.id}-k{budget}.json"

    def eval_record(self, cell: EvalCell) -> Path:
        return self.root / "cells" / "eval" / f"{cell.id}.json"

    def ceiling_record(self, cell: CeilingCell) -> Path:
        return self.root / "cells" / "ceiling" / f"{cell.id}.json"

    def cert_record(self, cell: CertCell) -> Path:
        return self.root / "cells" / "certificate" / f"{cell.id}.json"

    def read(self, path: Path) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(path.read_text())
        return data


@dataclass
class RunSummary:
    plan: Plan
    computed: dict[str, int]  # cells computed by this run, per stage
    skipped: int  # cells found finished
    seconds: float
    results: Path
    certificates: Path


# Rough single-core seconds per unit of work, for the ETA only: the bar advances by each
# finished cell's estimated cost, so its rate (and ETA) calibrates itself to the machine
# while cells that cost 1000x more than others do not make it jump.
_ENV_STEP = {"cheetah": 1 / 10_000, "walker": 1 / 4_000, "quadruped": 1 / 3_000}
_FLOPS = 2e10  # a CPU core's useful float throughput on these small networks
# Seconds per certificate step: the Heavy dual fitted at the radii where its SoftTV ball
# binds, three of RADII (four with a method's own eps below 0.717), ~10 s per 1,000 steps
# each (measured on quadruped and walker), plus ~4 s for the features and exact solves.
_CERTIFICATE = 3 * 10.0 / 1000
_CERTIFICATE_FIXED = 4.0


def _params(config: dict[str, Any], key: str, inp: int = 64) -> int:
    hidden = config.get(key, [256, 256])
    widths = [inp, *(hidden if isinstance(hidden, list | tuple) else [hidden] * 2)]
    return sum(a * b for a, b in itertools.pairwise(widths))


Cell = DemosCell | InferCell | AdaptCell | EvalCell | CeilingCell | CertCell


def cell_cost(cell: Cell, actor_params: dict[str, int]) -> float:
    """Estimated seconds of one cell on one core (demonstrations and evaluation: env steps;
    inference: forward and backward passes of the networks it trains through)."""
    if isinstance(cell, CertCell):
        return _CERTIFICATE_FIXED + _CERTIFICATE * cell.steps
    if isinstance(cell, DemosCell):
        return cell.episodes * 1000 * _ENV_STEP[cell.model.domain] * 1.3
    if isinstance(cell, EvalCell | CeilingCell):
        return cell.episodes * 1000 * _ENV_STEP[_demos(cell).model.domain] * 1.3
    if isinstance(cell, AdaptCell):
        return cell.config["budget"] * 1000 * _ENV_STEP[cell.infer.demos.model.domain] * 1.3
    cfg = cell.variant.config
    if cell.variant.preset is None:
        per_step = 6 * actor_params[cell.demos.model.checkpoint] * cfg["batch_size"]
    else:
        critic = 3 if cell.variant.method == "bedroil" else 1
        per_step = 6 * _params(cfg, "hidden") * cfg["batch_size"] * (1 + critic)
    return cfg["steps"] * per_step / _FLOPS


class _Progress:
    """Cells done/total and an ETA over the whole grid, weighted by estimated cost."""

    def __init__(self, costs: dict[str, float], done: set[str], enabled: bool) -> None:
        self.costs, self.total, self.done = costs, len(costs), len(done)
        self.bar = tqdm(
            total=round(sum(costs.values()), 1),
            initial=round(sum(costs[c] for c in done), 1),
            unit="s",
            unit_scale=False,
            disable=not enabled,
            dynamic_ncols=True,
            bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]",
        )
        self.name = "starting"
        self._describe()

    def _describe(self) -> None:
        self.bar.set_description(f"{self.name}: {self.done}/{self.total} cells")

    def stage(self, name: str) -> None:
        self.name = name
        self._describe()

    def update(self, cells: list[str]) -> None:
        self.done += len(cells)
        self._describe()
        self.bar.update(round(sum(self.costs[c] for c in cells), 1))

    def close(self) -> None:
        self.bar.close()


def _save_infer(store: Store, cell: InferCell, out: InferOutput) -> None:
    from rbfm.baselines import build_policy, write_policy
    from rbfm.envs import get_domain
    from rbfm.policy_files import save_z

    stem = store.policy(cell)
    stem.parent.mkdir(parents=True, exist_ok=True)
    d = cell.demos
    common = {
        "method": cell.variant.method,
        "seed": cell.seed,
        "domain": d.model.domain,
        "task": d.task,
        "num_demos": cell.num_demos,
        "demos": str(store.demos(d).relative_to(store.root)),
        "config": cell.variant.config,
        "seconds": out.seconds,
        "steps": out.steps,
    }
    if out.z is not None:
        common |= {"objective": out.objective, "converged": out.converged}
        policy_file = stem.with_suffix(".json")
        save_z(
            policy_file,
            torch.tensor(out.z),
            {**common, "checkpoint": d.model.checkpoint, "model_sha256": d.model.sha256},
        )
    else:
        assert out.policy is not None
        spec = get_domain(d.model.domain)
        hidden = tuple(cell.variant.config["hidden"])
        module = build_policy(cell.variant.method, spec.obs_dim, spec.action_dim, hidden)
        module.load_state_dict({k: torch.as_tensor(v) for k, v in out.policy.items()})
        write_policy(
            stem,
            cell.variant.method,
            module,
            d.model.domain,
            {**common, "preset": cell.variant.preset},
        )
        policy_file = stem.with_suffix(".json")
    _write_json(
        store.infer_record(cell),
        {
            "cell": cell.id,
            "method": cell.variant.method,
            "variant": cell.variant.label,
            "eps": cell.variant.eps,
            "seed": cell.seed,
            "seconds": out.seconds,
            "steps": out.steps,
            "objective": out.objective,
            "converged": out.converged,
            "extra": out.extra,
            "policy": str(policy_file.relative_to(store.root)),
        },
    )


def _stored_policy(store: Store, inf: InferCell) -> tuple[list[float] | None, BaselineState | None]:
    """A finished inference's task vector (FB methods) or policy (baselines)."""
    from safetensors.numpy import load_file

    from rbfm.baselines.common import read_policy_meta

    path = store.root / store.read(store.infer_record(inf))["policy"]
    if inf.variant.method in BASELINE_METHODS:
        meta = read_policy_meta(path.with_suffix(""))
        return None, (inf.variant.method, meta, load_file(str(path.with_suffix(".safetensors"))))
    return json.loads(path.read_text())["z"], None


def _adapted_z(store: Store, cell: EvalCell) -> tuple[list[float], Path]:
    """An adapted task vector: the search's best candidate after `cell.budget` episodes,
    written as a task-vector file beside the inference's (once)."""
    from rbfm.policy_files import save_z

    a, k = cell.adapt, cell.budget
    assert a is not None and k is not None
    rec = store.read(store.adapt_record(a))
    z = rec["candidates"][rec["best"][k // a.config["states"] - 1]]
    path = store.adapted_policy(a, k)
    if not path.exists():
        source = json.loads(
            (store.root / store.read(store.infer_record(a.infer))["policy"]).read_text()
        )
        source.pop("z")
        meta = source | {
            "method": a.infer.variant.method,
            "adaptation": {"cell": a.id, "episodes": k, "family": a.family, "level": a.level}
            | a.config,
        }
        save_z(path, torch.tensor(z), meta)
    return z, path


def _eval_entry(store: Store, cell: EvalCell) -> EvalEntry:
    inf = cell.infer
    z: list[float] | None
    pol: BaselineState | None
    if cell.adapt is not None:
        z, pol = _adapted_z(store, cell)[0], None
    else:
        z, pol = _stored_policy(store, inf)
    return EvalEntry(
        cell.id,
        inf.demos.model.domain,
        inf.demos.task,
        None if cell.family == NOMINAL else cell.family,
        cell.level,
        cell.episodes,
        cell.eval_seed,
        z,
        pol,
    )


def _ceiling_entry(cell: CeilingCell) -> EvalEntry:
    d = cell.demos
    return EvalEntry(
        cell.id,
        d.model.domain,
        d.task,
        None if cell.family == NOMINAL else cell.family,
        cell.level,
        cell.episodes,
        cell.eval_seed,
        list(d.expert_z),
        None,
        d.expert.noise,
    )


def _demos(cell: EvalCell | CeilingCell) -> DemosCell:
    return cell.infer.demos if isinstance(cell, EvalCell) else cell.demos


C = TypeVar("C", EvalCell, CeilingCell)


def _checkpoint(cell: EvalCell | CeilingCell) -> str:
    """The FB model whose actor an evaluation runs: the imitator's, or the expert's."""
    if isinstance(cell, EvalCell):
        return cell.infer.demos.model.checkpoint
    return cell.demos.expert.checkpoint


def _pack(cells: list[C], batch: int, parallel: int) -> list[list[C]]:
    """Evaluation cells grouped by the model they run, in plan order, into jobs of at most
    `batch` episodes (smaller when there are fewer episodes than workers can share)."""
    by_model: dict[str, list[C]] = {}
    for c in cells:
        by_model.setdefault(_checkpoint(c), []).append(c)
    total = sum(c.episodes for c in cells)
    size = max(1, min(batch, math.ceil(total / max(parallel, 1))))
    jobs: list[list[C]] = []
    for group in by_model.values():
        current: list[C] = []
        for c in group:
            if current and sum(x.episodes for x in current) + c.episodes > size:
                jobs.append(current)
                current = []
            current.append(c)
        if current:
            jobs.append(current)
    return jobs


def _pack_adapt(cells: list[AdaptCell], batch: int, parallel: int) -> list[list[AdaptCell]]:
    """Adaptations grouped by (model, config), in plan order, into jobs of at most
    `batch` episodes per round, and at least as many jobs as workers when they can be."""
    groups: dict[str, list[AdaptCell]] = {}
    for c in cells:
        key = json.dumps([c.infer.demos.model.checkpoint, c.config], sort_keys=True)
        groups.setdefault(key, []).append(c)
    size = max(1, min(batch, math.ceil(len(cells) / max(parallel, 1))))
    jobs: list[list[AdaptCell]] = []
    for group in groups.values():
        per_job = max(1, size // group[0].config["states"])
        jobs += [group[i : i + per_job] for i in range(0, len(group), per_job)]
    return jobs


def _result_row(store: Store, cell: EvalCell, returns: np.ndarray, unstable: int) -> ResultRow:
    inf = cell.infer
    record = store.read(store.infer_record(inf))
    policy = record["policy"]
    if cell.adapt is not None:
        policy = str(_adapted_z(store, cell)[1].relative_to(store.root))
    return ResultRow(
        domain=inf.demos.model.domain,
        dataset=inf.demos.model.dataset,
        task=inf.demos.task,
        method=inf.variant.method,
        variant=cell.variant,
        eps=inf.variant.eps,
        seed=inf.seed,
        family=cell.family,
        level=cell.level,
        episodes=len(returns),
        mean=float(returns.mean()),
        std=float(returns.std()),
        unstable=unstable,
        inference_seconds=float(record["seconds"]),
        policy=str(policy),
        cell=cell.id,
        expert=inf.demos.expert.name,
    )


def _actor_params(checkpoint: str) -> int:
    """The FB actor's parameter count, read from the weights file's header."""
    from safetensors import safe_open

    with safe_open(str(Path(checkpoint).with_suffix(".safetensors")), "np") as f:
        names = [k for k in f.keys() if k.startswith("actor.")]  # noqa: SIM118
        return sum(int(np.prod(f.get_slice(k).get_shape())) for k in names)


def _stage(
    executor: Executor, fn: Any, jobs: list[Any], progress: _Progress, name: str
) -> Iterator[tuple[int, Any]]:
    progress.stage(name)
    yield from executor.map_unordered(fn, jobs)


def run_experiment(
    spec: ExperimentSpec,
    out: str | os.PathLike[str],
    executor: Executor,
    progress: bool = True,
    eval_batch: int = EVAL_BATCH,
) -> RunSummary:
    """Runs every unfinished cell of the spec; returns what was done and the tables."""
    start = time.perf_counter()
    p = plan(spec)  # validates everything before any work
    store = Store(out)
    for kind in ("infer", "adapt", "eval", "ceiling", "certificate"):
        (store.root / "cells" / kind).mkdir(parents=True, exist_ok=True)
    for sub in ("demos", "policies"):
        (store.root / sub).mkdir(parents=True, exist_ok=True)
    _write_json(store.root / "spec.json", {"spec": dataclasses.asdict(spec)})
    demos_todo = [d for d in p.demos if not store.demos(d).exists()]
    infer_todo = [i for i in p.infers if not store.infer_record(i).exists()]
    adapt_todo = [a for a in p.adapts if not store.adapt_record(a).exists()]
    eval_todo = [e for e in p.evals if not store.eval_record(e).exists()]
    ceiling_todo = [c for c in p.ceilings if not store.ceiling_record(c).exists()]
    cert_todo = [c for c in p.certs if not store.cert_record(c).exists()]
    todo_cells: list[Cell] = [
        *demos_todo,
        *infer_todo,
        *adapt_todo,
        *eval_todo,
        *ceiling_todo,
        *cert_todo,
    ]
    skipped = p.total - len(todo_cells)
    actor = {ck: _actor_params(ck) for ck in {d.model.checkpoint for d in p.demos}}
    cells: list[Cell] = [*p.demos, *p.infers, *p.adapts, *p.evals, *p.ceilings, *p.certs]
    costs = {c.id: cell_cost(c, actor) for c in cells}
    bar = _Progress(costs, {c.id for c in cells} - {c.id for c in todo_cells}, progress)
    computed = {"demos": 0, "infer": 0, "eval": 0, "ceiling": 0, "certificate": 0}
    if p.adapts:  # runs without adaptation report what they always did
        computed["adapt"] = 0
    try:
        jobs_d = [
            DemosJob(
                d.expert.checkpoint,
                d.model.domain,
                d.task,
                list(d.expert_z),
                d.episodes,
                d.seed,
                d.expert.noise,
            )
            for d in demos_todo
        ]
        for i, demos in _stage(executor, run_demos, jobs_d, bar, "demonstrations"):
            save_demos(store.demos(demos_todo[i]), demos)
            computed["demos"] += 1
            bar.update([demos_todo[i].id])

        loaded: dict[str, Demos] = {}

        def drawn(cell: InferCell) -> Demos:
            d = cell.demos
            if d.id not in loaded:
                loaded[d.id] = load_demos(store.demos(d), d.model.domain)
            return loaded[d.id].sample(cell.num_demos, cell.seed)

        jobs_i = [
            InferJob(
                i.variant.method,
                i.variant.config | ({"bf16": True} if i.bf16 else {}),
                i.variant.preset,
                i.seed,
                drawn(i),
                None if i.variant.preset is not None else i.demos.model.checkpoint,
                str(store.policy(i)) + ".resume.pt" if i.variant.preset is not None else None,
            )
            for i in infer_todo
        ]
        for i, result in _stage(executor, run_infer, jobs_i, bar, "task inference"):
            _save_infer(store, infer_todo[i], result)
            computed["infer"] += 1
            bar.update([infer_todo[i].id])

        packed_a = _pack_adapt(adapt_todo, eval_batch, executor.parallel)
        jobs_a = [
            AdaptJob(
                cells[0].infer.demos.model.checkpoint,
                cells[0].config,
                [
                    AdaptTask(
                        a.id,
                        _stored_policy(store, a.infer)[0] or [],
                        drawn(a.infer),
                        a.infer.demos.model.domain,
                        a.infer.demos.task,
                        None if a.family == NOMINAL else a.family,
                        a.level,
                        a.infer.seed,
                    )
                    for a in cells
                ],
            )
            for cells in packed_a
        ]
        for i, outputs in _stage(executor, run_adapt, jobs_a, bar, "adaptation"):
            for a, res in zip(packed_a[i], outputs, strict=True):
                assert res.cell == a.id
                _write_json(store.adapt_record(a), dataclasses.asdict(res))
            computed["adapt"] += len(packed_a[i])
            bar.update([a.id for a in packed_a[i]])

        packed = _pack(eval_todo, eval_batch, executor.parallel)
        jobs_e = [
            EvalJob(cells[0].infer.demos.model.checkpoint, [_eval_entry(store, c) for c in cells])
            for cells in packed
        ]
        for i, outputs in _stage(executor, run_eval, jobs_e, bar, "evaluation"):
            for cell, res in zip(packed[i], outputs, strict=True):
                assert res.cell == cell.id
                row = _result_row(store, cell, res.returns, res.unstable)
                _write_json(
                    store.eval_record(cell),
                    {"row": dataclasses.asdict(row), "returns": res.returns.tolist()},
                )
            computed["eval"] += len(packed[i])
            bar.update([c.id for c in packed[i]])

        packed_c = _pack(ceiling_todo, eval_batch, executor.parallel)
        jobs_c = [EvalJob(_checkpoint(cs[0]), [_ceiling_entry(c) for c in cs]) for cs in packed_c]
        for i, outputs in _stage(executor, run_eval, jobs_c, bar, "expert evaluation"):
            for ceiling, res in zip(packed_c[i], outputs, strict=True):
                assert res.cell == ceiling.id
                _write_json(
                    store.ceiling_record(ceiling),
                    {"returns": res.returns.tolist(), "unstable": res.unstable},
                )
            computed["ceiling"] += len(packed_c[i])
            bar.update([c.id for c in packed_c[i]])

        # Last: a run stopped early has its returns before the certificates that explain them.
        jobs_k = []
        for c in cert_todo:
            z, pol = _stored_policy(store, c.infer)
            fb = c.infer.demos.model.checkpoint if z is not None else None
            jobs_k.append(CertJob(drawn(c.infer), c.radii, c.steps, fb, z, pol))
        for i, certs in _stage(executor, run_cert, jobs_k, bar, "certificates"):
            rec = [dataclasses.asdict(c) for c in certs]
            _write_json(
                store.cert_record(cert_todo[i]),
                {"infer": cert_todo[i].infer.id, "certificates": rec},
            )
            computed["certificate"] += 1
            bar.update([cert_todo[i].id])
    finally:
        bar.close()
        executor.close()
    results = write_table(store.root / "results.csv", collect_rows(store, p))
    certificates = write_certificates(store, p)
    write_ceilings(store, p)
    if p.adapts:
        write_adaptations(store, p)
    else:  # a run directory's table is its last plan's, as results.csv is
        (store.root / "adaptations.csv").unlink(missing_ok=True)
    return RunSummary(p, computed, skipped, time.perf_counter() - start, results, certificates)


def collect_rows(store: Store, p: Plan) -> list[ResultRow]:
    """The finished evaluation cells of a plan, in plan order."""
    rows = []
    for cell in p.evals:
        path = store.eval_record(cell)
        if path.exists():
            # The plan names the expert (cells stored before the expert axis lack it) and
            # the data label, which is not part of a cell's identity: relabelling a model
            # in the spec relabels its finished cells.
            demos = cell.infer.demos
            row = {
                **store.read(path)["row"],
                "expert": demos.expert.name,
                "dataset": demos.model.dataset,
            }
            rows.append(ResultRow(**row))
    return rows


def write_adaptations(store: Store, p: Plan) -> Path:
    """adaptations.csv: per finished adaptation, what it cost (episodes, seconds per
    problem in its batch) and the B distance to the demonstrations at its start z and
    at its answer after the whole budget."""
    rows: list[dict[str, object]] = []
    for a in p.adapts:
        path = store.adapt_record(a)
        if not path.exists():
            continue
        rec, inf = store.read(path), a.infer
        rows.append(
            {
                "domain": inf.demos.model.domain,
                "dataset": inf.demos.model.dataset,
                "task": inf.demos.task,
                "expert": inf.demos.expert.name,
                "method": inf.variant.method,
                "adaptation": a.label,
                "seed": inf.seed,
                "family": a.family,
                "level": "" if a.level is None else a.level,
                "episodes": len(rec["candidates"]) * a.config["states"],
                "seconds": round(rec["seconds"], 3),
                "unstable": rec["unstable"],
                "distance_start": rec["distances"][0],
                "distance_chosen": rec["distances"][rec["best"][-1]],
                "cell": a.id,
            }
        )
    out = store.root / "adaptations.csv"
    columns = tuple(rows[0]) if rows else ("cell",)
    atomic_csv(out, rows, columns)
    return out


def write_ceilings(store: Store, p: Plan) -> Path:
    """experts.csv (`table.CeilingRow`): per finished expert evaluation, the expert's own
    return at that level, and the mean return of its demonstrations."""
    rows = []
    demo_means: dict[str, float] = {}
    for cell in p.ceilings:
        path = store.ceiling_record(cell)
        d = cell.demos
        if not path.exists() or not store.demos(d).exists():
            continue
        if d.id not in demo_means:
            demo_means[d.id] = float(load_demos(store.demos(d), d.model.domain).returns.mean())
        rec = store.read(path)
        returns = np.asarray(rec["returns"])
        rows.append(
            CeilingRow(
                d.model.domain,
                d.model.dataset,
                d.task,
                d.expert.name,
                cell.family,
                cell.level,
                len(returns),
                float(returns.mean()),
                float(returns.std()),
                int(rec["unstable"]),
                demo_means[d.id],
                cell.id,
            )
        )
    return write_ceiling_table(store.root / "experts.csv", rows)


def write_certificates(store: Store, p: Plan) -> Path:
    """certificates.csv (`table.CertificateRow`): per finished certificate cell and radius,
    the nominal and worst-case imitation loss under the TV set (exact) and the Heavy set
    (upper bound)."""
    rows = []
    for cert in p.certs:
        rec_path = store.cert_record(cert)
        if not rec_path.exists():
            continue
        cell, d = cert.infer, cert.infer.demos
        policy = store.read(store.infer_record(cell))["policy"]
        for c in store.read(rec_path)["certificates"]:
            rows.append(
                CertificateRow(
                    d.model.domain,
                    d.model.dataset,
                    d.task,
                    d.expert.name,
                    cell.variant.method,
                    cell.variant.label,
                    cell.variant.eps,
                    cell.seed,
                    c["uncertainty_set"],
                    c["radius"],
                    c["nominal"],
                    c["worst_case"],
                    policy,
                )
            )
    return write_certificate_table(store.root / "certificates.csv", rows)
