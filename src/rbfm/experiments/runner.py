"""The experiment driver: plan, run the missing cells stage by stage, store each finished
cell atomically, and assemble the results tables.

Run directory:
    spec.json                 the spec as run (the last run's)
    demos/<id>.npz            expert demonstrations per (model, task)
    policies/<id>.json        task vectors; baselines: <id>.safetensors + <id>.json
    cells/infer/<id>.json     per inference: seconds, steps, policy file
    cells/eval/<id>.json      per evaluation: the results row and the episodes' returns
    cells/ceiling/<id>.json   per expert evaluation: the expert's returns
    planner/                  the "mpc" expert's episodes, each kept as it ends (minutes each)
    cells/certificate/<id>.json  per inference (certificate_steps > 0): its certificates
    results.csv               one row per evaluation cell of the spec (rbfm.experiments.table)
    certificates.csv          per inference and radius: nominal and worst-case loss
    run.lock                  held (fcntl) by the run writing into it, with its process id

Every file is written to a temporary name and renamed, and a cell's record is written
after its outputs, so a run killed at any moment keeps every finished cell and nothing
half-written; run again, it skips what is done and computes only the rest. A second run
into the directory while one is writing into it is refused (rbfm.locks).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from rbfm import checks
from rbfm.atomic import atomic_write, beside, check_pair, stem_of
from rbfm.data.demos import Demos, content_sha256, load_demos, save_demos
from rbfm.envs import NOMINAL, get_perturbation
from rbfm.errors import DatasetError
from rbfm.experiments.certificate import Certificate
from rbfm.experiments.executors import Executor
from rbfm.experiments.jobs import (
    AdaptJob,
    AdaptOutput,
    AdaptTask,
    BaselineState,
    CertJob,
    DemosJob,
    EvalEntry,
    EvalJob,
    EvalOutput,
    InferJob,
    InferOutput,
    PlanJob,
    run_adapt,
    run_cert,
    run_demos,
    run_eval,
    run_infer,
    run_plan,
)
from rbfm.experiments.plan import (
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
    AdaptationRow,
    CeilingRow,
    CertificateRow,
    ResultRow,
    write_adaptation_table,
    write_ceiling_table,
    write_certificate_table,
    write_table,
)
from rbfm.inference.goal import GoalSequences
from rbfm.locks import hold
from rbfm.methods import BASELINE_METHODS, SEQUENCE_METHODS

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
        self.planner = self.root / "planner"

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

    def folders(self) -> list[Path]:
        """Every folder the driver stores cells in; the planner's jobs write into theirs."""
        cells = [
            self.root / "cells" / k for k in ("infer", "adapt", "eval", "ceiling", "certificate")
        ]
        return [self.root, *cells, self.root / "demos", self.root / "policies"]


@dataclass
class RunSummary:
    plan: Plan
    computed: dict[str, int]  # cells computed by this run, per stage
    skipped: int  # cells found finished
    seconds: float
    results: Path
    certificates: Path

    def describe(self) -> str:
        done = ", ".join(f"{n} {k}" for k, n in self.computed.items())
        return (
            f"computed {done}; {self.skipped} cells were already done; {self.seconds:.1f} s\n"
            f"wrote {self.results} and {self.certificates}"
        )


# Rough single-core seconds per unit of work, for the ETA only: the bar advances by each
# finished cell's estimated cost, so its rate (and ETA) calibrates itself to the machine
# while cells that cost 1000x more than others do not make it jump.
_ENV_STEP = {"cheetah": 1 / 10_000, "walker": 1 / 4_000, "quadruped": 1 / 3_000}
# Seconds per planner episode at the domain's preset on one 2-thread job
# (docs/demonstrations.md: 19-47 s on cheetah, 184 s on walker, 149-299 s on quadruped).
_PLAN_EPISODE = {"cheetah": 35.0, "walker": 185.0, "quadruped": 225.0}
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
CellT = TypeVar("CellT", bound=Cell)
J = TypeVar("J")
R = TypeVar("R")


def cell_cost(cell: Cell, actor_params: dict[str, int]) -> float:
    """Estimated seconds of one cell on one core (demonstrations and evaluation: env steps;
    inference: forward and backward passes of the networks it trains through)."""
    if isinstance(cell, CertCell):
        return _CERTIFICATE_FIXED + _CERTIFICATE * cell.steps
    if isinstance(cell, DemosCell | CeilingCell) and _planned(cell):
        return cell.episodes * _PLAN_EPISODE[_domain(cell)]
    if isinstance(cell, DemosCell):
        return cell.episodes * 1000 * _ENV_STEP[cell.model.domain] * 1.3
    if isinstance(cell, EvalCell | CeilingCell):
        return cell.episodes * 1000 * _ENV_STEP[_demos(cell).model.domain] * 1.3
    if isinstance(cell, AdaptCell):
        return cell.config["budget"] * 1000 * _ENV_STEP[cell.infer.demos.model.domain] * 1.3
    cfg = cell.variant.config
    if "steps" not in cfg:  # closed forms (er, goal): one pass of B over the states
        return 1.0
    if cell.variant.preset is None:  # fm: its L-BFGS evaluations over its starts
        batch = int(cfg.get("batch_size", cfg.get("starts", 1)))
        per_step = 6 * actor_params[cell.demos.model.checkpoint] * batch
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

    def forget(self, cells: list[str]) -> None:
        """Cells counted done that are to be computed again."""
        self.done -= len(cells)
        self._describe()
        self.bar.update(-round(sum(self.costs[c] for c in cells), 1))

    def close(self) -> None:
        self.bar.close()


@dataclass
class _Run:
    """What a run's jobs are built from: its store, the size of its evaluation and
    adaptation jobs, and the demonstrations, each file loaded once."""

    store: Store
    batch: int  # episodes per evaluation job, per round of an adaptation job
    parallel: int  # jobs the executor runs at once
    plan: Plan
    loaded: dict[str, Demos] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)

    def _file(self, d: DemosCell) -> Demos:
        if d.id not in self.loaded:
            self.loaded[d.id] = load_demos(self.store.demos(d), d.model.domain)
        return self.loaded[d.id]

    def drawn(self, cell: InferCell) -> Demos:
        """The demonstrations an inference learns from."""
        return self._file(cell.demos).sample(cell.num_demos, cell.seed)

    def fingerprint(self, d: DemosCell) -> str:
        """The demonstrations file's content hash, which each inference and adaptation
        records: a cell's id names the demonstrations' recipe, this their bits."""
        if d.id not in self.fingerprints:
            self.fingerprints[d.id] = content_sha256(self._file(d))
        return self.fingerprints[d.id]


def _save_infer(run: _Run, cells: list[InferCell], out: InferOutput) -> None:
    from rbfm.baselines import build_policy, write_policy
    from rbfm.envs import get_domain
    from rbfm.policy_files import save_z

    (cell,) = cells
    store = run.store
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
    if out.goals is not None:
        from rbfm.inference.goal import write_goals

        model = {"checkpoint": d.model.checkpoint, "model_sha256": d.model.sha256}
        policy_file = write_goals(stem, out.goals, common | model)
    elif out.z is not None:
        common |= {"objective": out.objective, "converged": out.converged}
        policy_file = beside(stem, ".json")
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
        policy_file = beside(stem, ".json")
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
            "demos_sha256": run.fingerprint(d),
        },
    )


def _stored_policy(store: Store, inf: InferCell) -> tuple[list[float] | None, BaselineState | None]:
    """A finished inference's task vector (FB methods) or policy (baselines)."""
    from safetensors.numpy import load_file

    from rbfm.baselines.common import read_policy_meta

    path = store.root / store.read(store.infer_record(inf))["policy"]
    if inf.variant.method in BASELINE_METHODS:
        stem = stem_of(path)
        meta = read_policy_meta(stem)
        check_pair(stem, meta)  # a cell's pair torn by a killed write: refused, not read
        return None, (inf.variant.method, meta, load_file(str(beside(stem, ".safetensors"))))
    return json.loads(path.read_text())["z"], None


def _chosen(rec: dict[str, Any], a: AdaptCell, episodes: int) -> int:
    """The candidate an adaptation record answers with after `episodes` episodes."""
    return int(rec["best"][episodes // a.config["states"] - 1])


def _adapted_z(store: Store, cell: EvalCell) -> tuple[list[float], Path]:
    """An adapted task vector: the search's best candidate after `cell.budget` episodes,
    written as a task-vector file beside the inference's (once)."""
    from rbfm.policy_files import save_z

    a, k = cell.adapt, cell.budget
    assert a is not None and k is not None
    rec = store.read(store.adapt_record(a))
    z = rec["candidates"][_chosen(rec, a, k)]
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


def _eval_entry(store: Store, cell: EvalCell | CeilingCell) -> EvalEntry:
    """What an evaluation job runs for a cell: the expert itself (a ceiling, with its
    action noise), an adapted task vector, or the inference's policy."""
    d = _demos(cell)
    z: list[float] | None
    policy: BaselineState | None = None
    goals = None
    noise = 0.0
    if isinstance(cell, CeilingCell):
        z, noise = list(d.expert_z), d.expert.noise
    elif cell.adapt is not None:
        z = _adapted_z(store, cell)[0]
    elif cell.infer.variant.method in SEQUENCE_METHODS:
        z, goals = None, _stored_goals(store, cell.infer)
    else:
        z, policy = _stored_policy(store, cell.infer)
    family = None if cell.family == NOMINAL else cell.family
    return EvalEntry(
        cell.id, d.model.domain, d.task, family, cell.level, cell.episodes, cell.eval_seed, z,
        policy, noise, goals,
    )  # fmt: skip


def _stored_goals(store: Store, inf: InferCell) -> GoalSequences:
    from rbfm.inference.goal import read_goals

    path = store.root / store.read(store.infer_record(inf))["policy"]
    return read_goals(path, json.loads(path.read_text()))


def _demos(cell: EvalCell | CeilingCell) -> DemosCell:
    return cell.infer.demos if isinstance(cell, EvalCell) else cell.demos


def _planned(cell: DemosCell | CeilingCell) -> bool:
    """Whether the "mpc" planner demonstrates (its ceilings are planned, not evaluated)."""
    d = cell if isinstance(cell, DemosCell) else cell.demos
    return d.expert.planner is not None


def _domain(cell: DemosCell | CeilingCell) -> str:
    return (cell if isinstance(cell, DemosCell) else cell.demos).model.domain


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

    with safe_open(str(beside(Path(checkpoint), ".safetensors")), "np") as f:
        names = [k for k in f.keys() if k.startswith("actor.")]  # noqa: SIM118
        return sum(int(np.prod(f.get_slice(k).get_shape())) for k in names)


def _demos_job(run: _Run, cells: list[DemosCell]) -> DemosJob:
    (d,) = cells
    return DemosJob(
        d.expert.checkpoint,
        d.model.domain,
        d.task,
        list(d.expert_z),
        d.episodes,
        d.seed,
        d.expert.noise,
        d.expert.planner,
        str(run.store.planner) if d.expert.planner is not None else None,
    )


def _plan_job(run: _Run, cells: list[CeilingCell]) -> PlanJob:
    (c,) = cells
    assert c.demos.expert.planner is not None
    nominal = c.family == NOMINAL or c.level == get_perturbation(_domain(c), c.family).nominal
    return PlanJob(
        c.id,
        _domain(c),
        c.demos.task,
        c.demos.expert.planner,
        {} if nominal or c.level is None else {c.family: c.level},
        c.episodes,
        c.eval_seed,
        str(run.store.planner),
    )


def _save_demos(run: _Run, cells: list[DemosCell], demos: Demos) -> None:
    (d,) = cells
    save_demos(run.store.demos(d), demos)


def _infer_job(run: _Run, cells: list[InferCell]) -> InferJob:
    (i,) = cells
    baseline = i.variant.preset is not None
    return InferJob(
        i.variant.method,
        i.variant.config | ({"bf16": True} if i.bf16 else {}),
        i.variant.preset,
        i.seed,
        run.drawn(i),
        None if baseline else i.demos.model.checkpoint,
        str(run.store.policy(i)) + ".resume.pt" if baseline else None,
    )


def _adapt_job(run: _Run, cells: list[AdaptCell]) -> AdaptJob:
    tasks = [
        AdaptTask(
            a.id,
            _stored_policy(run.store, a.infer)[0] or [],
            run.drawn(a.infer),
            a.infer.demos.model.domain,
            a.infer.demos.task,
            None if a.family == NOMINAL else a.family,
            a.level,
            a.infer.seed,
        )
        for a in cells
    ]
    return AdaptJob(cells[0].infer.demos.model.checkpoint, cells[0].config, tasks)


def _save_adapt(run: _Run, cells: list[AdaptCell], outputs: list[AdaptOutput]) -> None:
    for a, res in _matched(cells, outputs):
        record = dataclasses.asdict(res) | {"demos_sha256": run.fingerprint(a.infer.demos)}
        _write_json(run.store.adapt_record(a), record)


def _eval_job(run: _Run, cells: list[C]) -> EvalJob:
    return EvalJob(_checkpoint(cells[0]), [_eval_entry(run.store, c) for c in cells])


def _save_eval(run: _Run, cells: list[EvalCell], outputs: list[EvalOutput]) -> None:
    for cell, res in _matched(cells, outputs):
        row = _result_row(run.store, cell, res.returns, res.unstable)
        _write_json(
            run.store.eval_record(cell),
            {"row": dataclasses.asdict(row), "returns": res.returns.tolist()},
        )


def _reuse_starts(run: _Run, p: Plan, todo: list[EvalCell]) -> list[EvalCell]:
    """An adapted task vector that is still its search's start z (the search kept it at
    that budget) is the inferred z's policy on the same initial states: its evaluation
    is the plain cell's, stored again under its own row with `same_as`, not recomputed.
    Returns the cells that still need an evaluation."""
    store = run.store
    plain = {
        (e.infer.id, e.family, e.level, e.episodes, e.eval_seed): e
        for e in p.evals
        if e.adapt is None
    }
    rest = []
    for cell in todo:
        a, k = cell.adapt, cell.budget
        twin = plain.get((cell.infer.id, cell.family, cell.level, cell.episodes, cell.eval_seed))
        if a is None or k is None or twin is None or not store.eval_record(twin).exists():
            rest.append(cell)
            continue
        if _chosen(store.read(store.adapt_record(a)), a, k) != 0:
            rest.append(cell)
            continue
        source = store.read(store.eval_record(twin))
        returns = np.asarray(source["returns"])
        row = _result_row(store, cell, returns, int(source["row"]["unstable"]))
        _write_json(
            store.eval_record(cell),
            {"row": dataclasses.asdict(row), "returns": returns.tolist(), "same_as": twin.id},
        )
    return rest


def _save_ceiling(run: _Run, cells: list[CeilingCell], outputs: list[EvalOutput]) -> None:
    for cell, res in _matched(cells, outputs):
        _write_json(
            run.store.ceiling_record(cell),
            {"returns": res.returns.tolist(), "unstable": res.unstable},
        )


def _cert_job(run: _Run, cells: list[CertCell]) -> CertJob:
    (c,) = cells
    z, pol = _stored_policy(run.store, c.infer)
    fb = c.infer.demos.model.checkpoint if z is not None else None
    return CertJob(run.drawn(c.infer), c.radii, c.steps, fb, z, pol)


def _save_cert(run: _Run, cells: list[CertCell], certs: list[Certificate]) -> None:
    (c,) = cells
    rec = [dataclasses.asdict(x) for x in certs]
    _write_json(run.store.cert_record(c), {"infer": c.infer.id, "certificates": rec})


Out = TypeVar("Out", AdaptOutput, EvalOutput)


def _matched(cells: list[CellT], outputs: list[Out]) -> Iterator[tuple[CellT, Out]]:
    """A batched job's outputs beside the cells they belong to (same order)."""
    for cell, res in zip(cells, outputs, strict=True):
        assert res.cell == cell.id
        yield cell, res


@dataclass(frozen=True)
class _Stage(Generic[CellT, J, R]):
    """One kind of cell: where the plan lists them, the file that marks one finished, how
    the unfinished are grouped into jobs (`pack`; default one job per cell), what a job
    runs, and how its result is stored."""

    key: str  # in RunSummary.computed
    name: str  # on the progress bar
    cells: Callable[[Plan], list[CellT]]
    record: Callable[[Store, CellT], Path]
    job: Callable[[_Run, list[CellT]], J]
    run: Callable[[J], R]
    save: Callable[[_Run, list[CellT], R], None]
    pack: Callable[[list[CellT], int, int], list[list[CellT]]] | None = None
    optional: bool = False  # in RunSummary.computed only when the plan has such cells
    # Settles what it can without a job once the stages before have run (counted under
    # "reused"); returns the cells still to compute.
    prepare: Callable[[_Run, Plan, list[CellT]], list[CellT]] | None = None

    def todo(self, store: Store, p: Plan) -> list[CellT]:
        return [c for c in self.cells(p) if not self.record(store, c).exists()]


_PLAIN_EVAL: _Stage[EvalCell, EvalJob, list[EvalOutput]] = _Stage(
    key="eval",
    name="evaluation",
    cells=lambda p: [e for e in p.evals if e.adapt is None],
    record=Store.eval_record,
    job=_eval_job,
    run=run_eval,
    save=_save_eval,
    pack=_pack,
)

# In order: each stage's jobs are built from the outputs of those before it.
_STAGES: tuple[_Stage[Any, Any, Any], ...] = (
    _Stage(
        key="demos",
        name="demonstrations",
        cells=lambda p: p.demos,
        record=Store.demos,
        job=_demos_job,
        run=run_demos,
        save=_save_demos,
    ),
    _Stage(
        key="infer",
        name="task inference",
        cells=lambda p: p.infers,
        record=Store.infer_record,
        job=_infer_job,
        run=run_infer,
        save=_save_infer,
    ),
    _Stage(
        key="adapt",
        name="adaptation",
        cells=lambda p: p.adapts,
        record=Store.adapt_record,
        job=_adapt_job,
        run=run_adapt,
        save=_save_adapt,
        pack=_pack_adapt,
        optional=True,
    ),
    _PLAIN_EVAL,
    # After the plain ones: an adapted z that is still its search's start reuses them.
    dataclasses.replace(
        _PLAIN_EVAL,
        name="evaluation of adapted z",
        cells=lambda p: [e for e in p.evals if e.adapt is not None],
        optional=True,
        prepare=_reuse_starts,
    ),
    _Stage(
        key="ceiling",
        name="expert evaluation",
        cells=lambda p: [c for c in p.ceilings if not _planned(c)],
        record=Store.ceiling_record,
        job=_eval_job,
        run=run_eval,
        save=_save_ceiling,
        pack=_pack,
    ),
    _Stage(
        key="ceiling",
        name="planner ceiling",
        cells=lambda p: [c for c in p.ceilings if _planned(c)],
        record=Store.ceiling_record,
        job=_plan_job,
        run=run_plan,
        save=_save_ceiling,
    ),
    # Last: a run stopped early has its returns before the certificates that explain them.
    _Stage(
        key="certificate",
        name="certificates",
        cells=lambda p: p.certs,
        record=Store.cert_record,
        job=_cert_job,
        run=run_cert,
        save=_save_cert,
    ),
)


def _stale(run: _Run, p: Plan) -> dict[str, list[tuple[str, str]]]:
    """Per demonstrations file, the finished inferences and adaptations whose record names
    other demonstrations than the file holds now: (cell id, recorded content hash)."""
    stale: dict[str, list[tuple[str, str]]] = {}
    cells: list[tuple[str, DemosCell, Path]] = [
        *((i.id, i.demos, run.store.infer_record(i)) for i in p.infers),
        *((a.id, a.infer.demos, run.store.adapt_record(a)) for a in p.adapts),
    ]
    for cell, d, record in cells:
        if not record.exists():
            continue
        recorded = run.store.read(record).get("demos_sha256")
        # A record without the field predates it and names no content: taken as it is.
        if recorded is not None and recorded != run.fingerprint(d):
            stale.setdefault(d.id, []).append((cell, recorded))
    return stale


def _forget(store: Store, p: Plan, stale: set[str]) -> list[str]:
    """Deletes the records of the stale cells and of every cell built on them, so that
    the run computes them again; returns the ids of the records deleted."""
    infers = {i.id for i in p.infers if i.id in stale}
    adapts = {a.id for a in p.adapts if a.id in stale or a.infer.id in infers}
    records = [
        *((i.id, store.infer_record(i)) for i in p.infers if i.id in infers),
        *((a.id, store.adapt_record(a)) for a in p.adapts if a.id in adapts),
        *(
            (e.id, store.eval_record(e))
            for e in p.evals
            if e.infer.id in infers or (e.adapt is not None and e.adapt.id in adapts)
        ),
        *((c.id, store.cert_record(c)) for c in p.certs if c.infer.id in infers),
    ]
    gone = []
    for cell, path in records:
        if path.exists():
            path.unlink()
            gone.append(cell)
    return gone


def _check_demos(run: _Run, p: Plan, forget: bool) -> list[str]:
    """Refuses finished cells inferred from other demonstrations than the run's files
    hold (a file regenerated on a CPU with other vector units differs in its last bits;
    a cell's id names the recipe, not the bits), or with `forget` deletes them and the
    cells built on them: returns the ids deleted."""
    stale = _stale(run, p)
    if not stale:
        return []
    if forget:
        return _forget(run.store, p, {c for cells in stale.values() for c, _ in cells})
    d = next(d for d in p.demos if d.id in stale)
    cell, recorded = stale[d.id][0]
    n = sum(len(cells) for cells in stale.values())
    others = f" (and {len(stale) - 1} other demonstrations files)" if len(stale) > 1 else ""
    raise DatasetError(
        f"{run.store.demos(d)}{others} holds other demonstrations than {n} finished task "
        f"inferences and adaptations read (content sha256 {run.fingerprint(d)[:16]} here, "
        f"{recorded[:16]} in the record of cell {cell}; rollouts regenerated on a CPU with "
        "other vector units differ in their last bits): put back the demonstrations they "
        "read, or run again with --forget-stale (forget_stale=True) to compute them and "
        "the cells built on them again"
    )


def _run_stage(
    stage: _Stage[Any, Any, Any],
    todo: list[Cell],
    run: _Run,
    executor: Executor,
    bar: _Progress,
    computed: dict[str, int],
) -> None:
    """Runs a stage's unfinished cells, storing each job's result as it finishes."""
    bar.stage(stage.name)
    if stage.prepare is not None and todo:
        rest = stage.prepare(run, run.plan, todo)
        left = {c.id for c in rest}
        settled = [c.id for c in todo if c.id not in left]
        computed["reused"] += len(settled)
        bar.update(settled)
        todo = rest
    if stage.pack is None:
        batches = [[c] for c in todo]
    else:
        batches = stage.pack(todo, run.batch, run.parallel)
    jobs = [stage.job(run, cells) for cells in batches]
    for i, result in executor.map_unordered(stage.run, jobs):
        stage.save(run, batches[i], result)
        computed[stage.key] += len(batches[i])
        bar.update([c.id for c in batches[i]])


def run_experiment(
    spec: ExperimentSpec,
    out: str | os.PathLike[str],
    executor: Executor,
    progress: bool = True,
    eval_batch: int = EVAL_BATCH,
    forget_stale: bool = False,
) -> RunSummary:
    """Runs every unfinished cell of the spec; returns what was done and the tables.
    Finished inferences and adaptations that read other demonstrations than the run's
    files now hold are refused once the demonstrations are there, or with
    `forget_stale` computed again with every cell built on them."""
    start = time.perf_counter()
    p = plan(spec)  # validates everything before any work
    store = Store(out)
    # A cell that cannot be stored is refused now, not after its compute is spent.
    for folder in [*store.folders(), store.planner]:
        checks.out_dir(folder)
    with hold(store.root):
        for folder in store.folders():
            folder.mkdir(parents=True, exist_ok=True)
        _write_json(store.root / "spec.json", {"spec": dataclasses.asdict(spec)})
        todo = [s.todo(store, p) for s in _STAGES]
        skipped = p.total - sum(len(rest) for rest in todo)
        actor = {ck: _actor_params(ck) for ck in {d.model.checkpoint for d in p.demos}}
        cells: list[Cell] = [c for s in _STAGES for c in s.cells(p)]
        costs = {c.id: cell_cost(c, actor) for c in cells}
        unfinished = {c.id for rest in todo for c in rest}
        bar = _Progress(costs, {c.id for c in cells} - unfinished, progress)
        computed = {s.key: 0 for s in _STAGES if not s.optional}
        computed |= {s.key: 0 for s in _STAGES if s.optional and s.cells(p)}
        computed |= {"reused": 0} if p.adapts else {}
        run = _Run(store, eval_batch, executor.parallel, p)
        try:
            for k, s in enumerate(_STAGES):
                if s.key == "infer":  # the demonstrations are all there now
                    forgotten = _check_demos(run, p, forget_stale)
                    if forgotten:
                        bar.forget(forgotten)
                        skipped -= len(forgotten)
                        todo[k:] = [later.todo(store, p) for later in _STAGES[k:]]
                _run_stage(s, todo[k], run, executor, bar, computed)
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


def pending(p: Plan, out: str | os.PathLike[str]) -> str:
    """How many of each kind of cell a run into `out` finds done, and the share of the
    estimated work that is (the progress bar's cost model: relative, not seconds)."""
    store = Store(out)
    actor = {ck: _actor_params(ck) for ck in {d.model.checkpoint for d in p.demos}}
    parts, left, total = [], 0.0, 0.0
    for s in _STAGES:
        cells = s.cells(p)
        if not cells:
            continue
        todo = s.todo(store, p)
        parts.append(f"{len(cells) - len(todo)}/{len(cells)} {s.name}")
        left += sum(cell_cost(c, actor) for c in todo)
        total += sum(cell_cost(c, actor) for c in cells)
    share = 100 if total == 0 else math.floor(100 * (1 - left / total))  # 100 only when all are
    return f"done in {store.root}: {', '.join(parts)}; {share}% of the estimated work"


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


def _agreement(rec: dict[str, Any]) -> dict[str, Any]:
    """How an adaptation's candidates fared on its own episodes: the start's, the chosen
    one's and the best one's return, and how well each reward-free criterion ranks the
    candidates by return (Spearman; None where undefined or not recorded)."""
    from scipy.stats import spearmanr

    returns = np.asarray(rec["returns"], dtype=float)

    def rank(score: list[float] | None) -> float | None:
        if score is None or len(returns) < 3 or np.ptp(returns) == 0 or np.ptp(score) == 0:
            return None
        return round(float(spearmanr(score, returns).statistic), 4)

    return {
        "return_start": float(returns[0]),
        "return_chosen": float(returns[rec["best"][-1]]),
        "return_best": float(returns.max()),
        "spearman_distance": rank([-d for d in rec["distances"]]),
        "spearman_implied": rank(rec.get("implied")),
    }


def write_adaptations(store: Store, p: Plan) -> Path:
    """adaptations.csv (`table.AdaptationRow`): per finished adaptation, what it cost
    (episodes, seconds per problem in its batch), the B distance to the demonstrations at
    its start z and at its answer after the whole budget, and its candidates' returns on
    its own episodes (`_agreement`)."""
    rows = []
    for a in p.adapts:
        path = store.adapt_record(a)
        if not path.exists():
            continue
        rec, inf = store.read(path), a.infer
        rows.append(
            AdaptationRow(
                domain=inf.demos.model.domain,
                dataset=inf.demos.model.dataset,
                task=inf.demos.task,
                expert=inf.demos.expert.name,
                method=inf.variant.method,
                adaptation=a.label,
                seed=inf.seed,
                family=a.family,
                level=a.level,
                episodes=len(rec["candidates"]) * a.config["states"],
                seconds=round(rec["seconds"], 3),
                unstable=rec["unstable"],
                distance_start=rec["distances"][0],
                distance_chosen=rec["distances"][rec["best"][-1]],
                **_agreement(rec),
                cell=a.id,
            )
        )
    return write_adaptation_table(store.root / "adaptations.csv", rows)


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
