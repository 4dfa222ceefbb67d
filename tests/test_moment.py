"""E_rho[B B^T] stored with a model, and ER-FB whitened by it: the least-squares z of the
density-ratio reward, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import fake_episode
from rbfm.data.demos import Demos
from rbfm.data.exorl import write_episode
from rbfm.envs import TASKS
from rbfm.errors import ConfigError, DatasetError
from rbfm.fb import FBModel, fb_config
from rbfm.fb.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rbfm.fb.moment import MOMENT_STATES, b_moment, read_moment, whiten
from rbfm.fb.networks import project
from rbfm.fb.reward_inference import export_with_task_z
from rbfm.inference import generate_demos, infer, warm_start
from rbfm.inference.expert_demos import demo_embedding


@pytest.fixture(scope="module")
def demos(model: FBModel) -> Demos:
    z = project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(1)), 1.0)
    return generate_demos(model, "cheetah", "run", z * model.radius, episodes=2, seed=0)


def test_whitened_z_is_the_least_squares_fit_of_the_density_ratio() -> None:
    # rho uniform over n states; the demonstrations' distribution p over the same states.
    # The ratio reward r = p / rho = n p; argmin_z E_rho[(B^T z - r)^2] = M^{-1} E_p[B].
    g = torch.Generator().manual_seed(0)
    n, d = 40, 6
    b = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(0.3, 2.0, d)
    p = torch.rand(n, generator=g, dtype=torch.float64)
    p /= p.sum()
    fit = torch.linalg.lstsq(b, n * p).solution
    z = whiten(b.T @ b / n, p @ b)
    torch.testing.assert_close(z, fit, rtol=1e-4, atol=1e-6)  # the solve's ridge: ~1e-5
    # ER-FB's E_p[B] is that fit only when the moment is the identity.
    assert not torch.allclose(p @ b, fit, rtol=0.1)


def test_er_is_the_zero_shot_z_of_the_ratios_least_squares_fit(model: FBModel) -> None:
    # rho uniform over n states, the demonstrations' p on them: the fit B^T w of the ratio
    # n p is a reward whose FB z, E_rho[B B^T w], is ER-FB's E_p[B] whatever E_rho[B B^T].
    from rbfm.fb.reward_inference import infer_z

    g = torch.Generator().manual_seed(4)
    obs = torch.randn(400, 17, generator=g)
    with torch.no_grad():
        b = model.backward_map(obs).double()
    p = torch.rand(len(obs), generator=g, dtype=torch.float64)
    p /= p.sum()
    w = torch.linalg.lstsq(b, len(obs) * p).solution
    z = infer_z(model, obs.numpy(), (b @ w).numpy())
    er = project((p @ b).float(), model.radius)
    torch.testing.assert_close(z, er, rtol=1e-4, atol=1e-4)
    whitened = project(whiten(b.T @ b / len(obs), p @ b).float(), model.radius)
    assert float(torch.linalg.vector_norm(whitened - er)) > 1e-2  # tiny B: far from I


def test_b_moment_is_the_mean_outer_product(model: FBModel) -> None:
    obs = torch.randn(20_000, 17, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        b = model.backward_map(obs).double()
    torch.testing.assert_close(b_moment(model, obs), b.T @ b / len(obs))


def test_er_whitened_by_the_identity_is_er(model: FBModel, demos: Demos) -> None:
    model.b_moment = torch.eye(model.cfg.z_dim, dtype=torch.float64)
    try:
        result = infer(model, demos, "er", whiten=True)
    finally:
        model.b_moment = None
    torch.testing.assert_close(result.z, warm_start(model, demos))


def test_a_moment_set_by_hand_is_checked_as_a_stored_one(model: FBModel, demos: Demos) -> None:
    d = model.cfg.z_dim
    for bad, why in ((torch.zeros(d, d), "not positive definite"), (torch.eye(d + 1), "shape")):
        model.b_moment = bad.double()
        try:
            with pytest.raises(ConfigError, match=f"the model's E_rho.* cannot whiten: .*{why}"):
                infer(model, demos, "er", whiten=True)
        finally:
            model.b_moment = None


def test_er_whitened_solves_against_the_models_moment(model: FBModel, demos: Demos) -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(model.cfg.z_dim, model.cfg.z_dim, generator=g, dtype=torch.float64)
    model.b_moment = a @ a.T / model.cfg.z_dim + torch.eye(model.cfg.z_dim, dtype=torch.float64)
    try:
        z = infer(model, demos, "er", whiten=True).z
        e = demo_embedding(model, demos).double()
        expected = project(torch.linalg.solve(model.b_moment, e).float(), model.radius)
    finally:
        model.b_moment = None
    torch.testing.assert_close(z, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(z, warm_start(model, demos), atol=1e-2)


def test_whiten_without_a_stored_moment_is_refused(model: FBModel, demos: Demos) -> None:
    with pytest.raises(ConfigError, match=r"whiten=True needs E_rho\[B B\^T\].*rbfm export"):
        infer(model, demos, "er", whiten=True)
    with pytest.raises(ConfigError, match=r"er\.whiten"):
        infer(model, demos, "er", whiten="yes")


def test_the_refusal_names_the_shipped_model_that_stores_it(model: FBModel, demos: Demos) -> None:
    with pytest.raises(ConfigError, match=r"Models that store it: .*cheetah:rnd-v1"):
        infer(model, demos, "er", whiten=True)
    shipped, _ = load_checkpoint("cheetah:rnd-v1")
    assert shipped.b_moment is not None
    eig = torch.linalg.eigvalsh(shipped.b_moment)
    assert 0.5 < float(eig.min()) < float(eig.max()) < 2.0  # near orthonormal, not exactly
    assert infer(shipped, demos, "er", whiten=True).z.isfinite().all()


def _run_with_data(tmp_path: Path) -> tuple[Path, Path]:
    buffer = tmp_path / "data" / "cheetah" / "rnd" / "buffer"
    buffer.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        write_episode(buffer, i, fake_episode("cheetah", 40, rng))
    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny"))
    meta = {"domain": "cheetah", "task_z": {t: [1.0] * model.cfg.z_dim for t in TASKS["cheetah"]}}
    meta["dataset"] = {"path": str(buffer), "algo": "rnd", "transitions": 120}
    (tmp_path / "run").mkdir()
    save_checkpoint(tmp_path / "run" / "best", model, meta)
    return tmp_path / "run" / "best", buffer


@pytest.mark.parametrize("fp16", [False, True])
def test_export_stores_the_moment_of_the_model_it_writes(tmp_path: Path, fp16: bool) -> None:
    from rbfm.data import load_dataset

    best, buffer = _run_with_data(tmp_path)
    stem = export_with_task_z(str(best), str(tmp_path / "ship" / "cheetah_x"), fp16=fp16)
    exported, meta = load_checkpoint(stem, device="cpu")
    record = meta["b_moment"]
    data = load_dataset(buffer, "cheetah")
    n = len(data)
    assert record["states"] == min(MOMENT_STATES, n) == n  # all of a small dataset
    obs = torch.as_tensor(data.subsample(n, 0).next_observation)
    assert exported.b_moment is not None
    # Stored in float32, of the exported (fp16: rounded) weights.
    torch.testing.assert_close(exported.b_moment, b_moment(exported, obs), rtol=1e-6, atol=1e-7)
    # A second export without the data keeps it.
    again = export_with_task_z(str(stem), str(tmp_path / "ship" / "cheetah_y"))
    assert load_checkpoint(again)[1]["b_moment"] == record


def test_export_without_the_data_stores_no_moment(tmp_path: Path) -> None:
    best, buffer = _run_with_data(tmp_path)
    for f in buffer.iterdir():
        f.unlink()
    buffer.rmdir()
    stem = export_with_task_z(str(best), str(tmp_path / "ship" / "cheetah_x"))
    model, meta = load_checkpoint(stem)
    assert "b_moment" not in meta and model.b_moment is None


def test_export_refuses_data_too_small_for_the_moment_before_writing(tmp_path: Path) -> None:
    best, buffer = _run_with_data(tmp_path)
    for f in buffer.iterdir():
        f.unlink()
    write_episode(buffer, 0, fake_episode("cheetah", 20, np.random.default_rng(1)))
    out = tmp_path / "ship" / "cheetah_x"
    with pytest.raises(DatasetError, match=r"19 transitions; E_rho\[B B\^T\] needs at least 80"):
        export_with_task_z(str(best), str(out))
    assert not out.parent.exists() or not any(out.parent.iterdir())


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ([[1.0, 0.0], [0.0, 1.0]], r"shape \(2, 2\)"),
        ("eye", "not a matrix of numbers"),
        (np.where(np.eye(8) > 0, np.nan, 0.0).tolist(), "not finite"),
        ((np.eye(8) + np.triu(np.ones((8, 8)), 1)).tolist(), "not symmetric"),
        ((-np.eye(8)).tolist(), "not positive definite"),
        (np.where(np.eye(8) > 0, "1", "0").tolist(), "not a matrix of numbers"),
        (np.eye(8, dtype=bool).tolist(), "not a matrix of numbers"),
        # float32 would round it to inf, or a whitened z to 0
        ((1e300 * np.eye(8)).tolist(), "beyond float32's range"),
    ],
)
def test_a_broken_stored_moment_is_refused_naming_the_file(
    tmp_path: Path, matrix: object, message: str
) -> None:
    save_checkpoint(tmp_path / "best", FBModel(17, 6, fb_config("tiny")), {"domain": "cheetah"})
    description = tmp_path / "best.json"
    meta = json.loads(description.read_text())
    meta["b_moment"] = {"states": 10, "seed": 0, "matrix": matrix}
    description.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=rf"best\.json: b_moment.*{message}"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="expected an object"):
        read_moment([[1.0]], 1)
