"""The valid examples of tests/suites/test_api_sweep.py, keyed by parameter name.

``VALID[name]`` is a zero-argument factory giving a fresh valid value for every parameter called
``name`` (a new public callable whose parameters are all named here is swept without editing);
``VALID_AT[(callable, name)]`` overrides it for one callable (``callable`` is the full dotted
name, ``Class.method`` or the bare function name). A parameter with a non-None default and no
entry is swept from its default. ``CONSTRAINED`` names the parameters whose valid values are
positive (or non-negative), so that accepting a negative value is a failure; ``FREE_TEXT`` the
string parameters that take any text (a label, a name), which get no "unknown option" value.
"""

from __future__ import annotations

import numpy as np

import riemattn as ra

D = 3
#: Four tokens on S^2, generic (no two equal or antipodal).
Y = ra.Sphere(D - 1).projection(np.array([[1.0, 0.2, 0.1], [0.3, 1.0, 0.0], [0.1, 0.4, 1.0], [1.0, 1.0, 1.0]]))
W = np.diag([1.0, 2.0, 3.0])
YW = ra.Ellipsoid(W).projection(Y)


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    return plt.figure().add_subplot(projection="3d")


def _field():
    return ra.AttentionField(np.eye(D))


VALID = {
    # tokens and vectors
    "y": lambda: Y.copy(),
    "y0": lambda: Y.copy(),
    "x": lambda: Y.copy(),
    "x0": lambda: Y.copy(),
    "point": lambda: Y.copy(),
    "base_point": lambda: Y[0].copy(),
    "v": lambda: np.array([0.0, 0.0, 1.0]),
    # matrices
    "W": lambda: W.copy(),
    "P": lambda: np.eye(D),
    "U": lambda: np.eye(D),
    "Q": lambda: np.eye(D),
    "K": lambda: np.eye(D),
    "V": lambda: np.eye(D),
    "Wo": lambda: np.eye(D),
    "A": lambda: np.zeros((D, D)),
    # scalars
    "beta": lambda: 1.0,
    "t": lambda: 0.0,
    "dt": lambda: 0.05,
    "d": lambda: D,
    "n": lambda: 4,
    "k": lambda: 2,
    "dim": lambda: D - 1,
    "tol": lambda: 0.1,
    "rtol": lambda: 1e-6,
    "atol": lambda: 1e-9,
    "eps": lambda: 0.1,
    "seed": lambda: 0,
    "n_samples": lambda: 2,
    "rho": lambda: 0.5,
    # objects
    "t_span": lambda: (0.0, 0.1),
    "field": _field,
    "manifold": lambda: ra.Sphere(D - 1),
    "stepper": lambda: "rk4",
    # more tokens, vectors and matrices
    "X": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "Y": lambda: ra.Sphere(D - 1).to_tangent(np.arange(12.0).reshape(4, D), Y),
    "F": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "vector": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "tangent_vec": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "tangent_vec_a": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "tangent_vec_b": lambda: ra.Sphere(D - 1).to_tangent(np.arange(12.0).reshape(4, D), Y),
    "tangent_vec_c": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "tangent_vector": lambda: ra.Sphere(D - 1).to_tangent(np.ones(D), Y[0]),
    "direction": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
    "point_a": lambda: Y.copy(),
    "point_b": lambda: Y[::-1].copy(),
    "end_point": lambda: Y[::-1].copy(),
    "mu": lambda: Y[0].copy(),
    "points": lambda: [Y.copy(), Y[::-1].copy()],
    "p": lambda: Y[0].copy(),
    "theta": lambda: np.array([0.1, 0.7, 2.0, 4.0]),
    "theta0": lambda: np.array([0.1, 0.7, 2.0, 4.0]),
    "r": lambda: 1.0,
    "times": lambda: np.array([0.0, 0.05, 0.1]),
    "saveat": lambda: np.array([0.0, 0.05, 0.1]),
    "t_eval": lambda: np.array([0.0, 0.05, 0.1]),
    "z": lambda: np.array([-1.0, -0.5]),
    "B": lambda: np.eye(D)[None],
    "omega": lambda: np.array([1.0]),
    "phi": lambda: np.array([0.0]),
    "stacks": lambda: [np.eye(D)[None], 2 * np.eye(D)[None]],
    "u": lambda: np.array([1.0, 0.0, 0.0]),
    "inv_sqrt_W": lambda: np.eye(D),
    # more scalars
    "h": lambda: 0.05,
    "first_step": lambda: 0.01,
    "event_tol": lambda: 1e-10,
    "threshold": lambda: 0.1,
    "value": lambda: 0.5,
    "alpha": lambda: 1.0,
    "switch": lambda: 0.5,
    "sigma": lambda: 0.1,
    "scale": lambda: 1.0,
    "clusters": lambda: 2,
    "segments": lambda: 2,
    "n_points": lambda: 4,
    "n_prompts": lambda: 2,
    "n_tokens": lambda: 3,
    "vocab_size": lambda: 10,
    "N": lambda: 16,
    "lo": lambda: 0.0,
    "hi": lambda: 3.0,
    "index": lambda: (),
    "batch_shape": lambda: (),
    "max_steps": lambda: 2000,
    "slots": lambda: 2,
    "variances": lambda: np.array([0.5, 1.0]),
    # options and objects
    "name": lambda: "an-event",
    "label": lambda: "p",
    "placement": lambda: "pre",
    "method": lambda: "rk4",
    "normalization": lambda: "softmax",
    "variant": lambda: "fixed",
    "family": lambda: "gpt2",
    "size": lambda: "tiny",
    "device": lambda: "cpu",
    "fn": lambda: (lambda y: np.sum(y[..., 0], axis=-1)),
    "g": lambda: (lambda t, y: float(np.sum(y[..., 0])) - 10.0),
    "f": lambda: (lambda x: (x ** 2).sum()),
    "hessian": lambda: _hessian(),
    "func": lambda: (lambda t, y: np.zeros_like(y)),
    "generator": lambda: (lambda t, y: np.zeros(y.shape[:-1] + (D, D))),
    "events": lambda: [],
    "save_fn": lambda: (lambda t, y: np.sum(y, axis=-1)),
    "counts": lambda: [3, 2],
    "time_vectorized": lambda: False,
    "rescaled": lambda: False,
    "progress": lambda: False,
    "ax": _axes,
    "plot": lambda: (lambda ax: None),
    "rng": lambda: np.random.default_rng(0),
    "recipe": lambda: "identity",
    "y_shape": lambda: (4, D),
    "grid": lambda: {"beta": [1.0, 2.0]},
    "coords": lambda: {"beta": 1.0},
    "given": lambda: {},
    "sizes": lambda: [2, 2],
    "terminal_at": lambda: 2,
    "expected": lambda: 4,
    "ts": lambda: np.array([1e-2, 1e-3]),
    "order": lambda: 1,
    "alpha_tab": lambda: np.zeros((1, 1)),
    "Gamma": lambda: np.full((1, 1), 0.5),
    "b": lambda: np.array([1.0]),
    # weighted clusters (analysis.weighted_clusters), positional attention (AttentionField)
    "w": lambda: np.array([1.0, 2.0, 1.0, 1.0]),
    "c0": lambda: 1.0,
    "alibi": lambda: 0.5,
    "rope": lambda: np.array([1.0]),
    "rope_key": lambda: np.eye(D),
    "tangent_vec_d": lambda: ra.Sphere(D - 1).to_tangent(np.ones((4, D)), Y),
}

#: Optional parameters passed in every call (the valid one too) when the callable has them.
#: ``max_steps``: the documented bound on the work of every solve (integrate, integrate_sde,
#: CircleDensity.solve, cluster_staircase, ...), pinned low so that a tiny step or tolerance
#: (1e-300) shows the bound within the sweep's time limit rather than after 10^6 steps (issue 58).
PINNED = {"base_point", "max_steps"}

VALID_AT = {
    ("potential", "x"): lambda: YW.copy(),
    ("potential", "P"): lambda: W.copy(),
    ("equiangular_rho", "t"): lambda: np.array([0.0, 1.0]),
    ("equiangular_placement", "t"): lambda: np.array([0.0, 0.1]),
    ("brownian_mean_cosine", "t"): lambda: np.array([0.0, 1.0]),
    ("phase_boundary", "t"): lambda: np.array([1.0, 2.0]),
    ("wendel_probability", "dim"): lambda: D,
    ("k_clusters", "k"): lambda: 2,
    ("regular_simplex", "k"): lambda: 3,
    ("circle_cluster_spectrum", "n"): lambda: 4,
    ("riemattn.solvers.core.integrate.integrate", "method"): lambda: "rk4",
    ("riemattn.dynamics.circle.CircleField.solve", "method"): lambda: "DOP853",
    ("riemattn.dynamics.circle.CircleField.solve", "t_span"): lambda: (0.0, 0.1),
    ("CircleField.jacobian", "theta"): lambda: np.array([0.1, 0.7, 2.0, 4.0]),
    ("riemattn.dynamics.circle.from_points", "x"): lambda: Y[:, :2] / np.linalg.norm(Y[:, :2], axis=-1, keepdims=True),
    ("riemattn.dynamics.circle.CircleField", "beta"): lambda: 1.0,
    ("TimeVaryingHeads", "A"): lambda: np.zeros((1, 1, D, D)),
    ("ButcherTableau", "c"): lambda: (0.0,),
    ("ButcherTableau", "A"): lambda: ((0.0,),),
    ("ButcherTableau", "b"): lambda: (1.0,),
    ("order_residuals", "A"): lambda: np.zeros((1, 1)),
    ("rosenbrock_residuals", "alpha"): lambda: np.zeros((1, 1)),
    ("stability_function", "alpha"): lambda: np.zeros((1, 1)),
    ("riemattn.experiments.get", "name"): lambda: "glpr-fig3",
    ("integrate", "dt"): lambda: 0.05,
    ("integrate_sde", "dt"): lambda: 0.05,
    ("integrate_sde", "method"): lambda: "em",
    ("integrate_checkpointed", "y0"): lambda: _torch(Y),
    ("integrate_checkpointed", "dt"): lambda: 0.05,
    ("consensus_points", "U"): lambda: np.diag([3.0, 2.0, 1.0]),
    ("predicted_consensus", "U"): lambda: np.diag([3.0, 2.0, 1.0]),
    ("jvp", "v"): lambda: np.ones((4, D)),
    ("PiecewiseConstantHeads", "times"): lambda: np.array([0.0, 1.0]),
    ("deduplicate", "points"): lambda: [_critical_point()],
    ("InteractionHessian.hvp_induced", "V"): lambda: np.ones((4, D)),
    ("InteractionHessian.euclidean_hvp", "V"): lambda: np.ones((4, D)),
    ("riemattn.geometry.manifolds.Euclidean", "dim"): lambda: D,
    ("parse_variant", "variant"): lambda: "random",
    ("plot_circle_angles", "t"): lambda: np.array([0.0, 1.0]),
    ("plot_circle_angles", "theta"): lambda: np.array([[0.1, 0.7], [0.2, 0.6]]),
    ("plot_sphere_trajectories", "y"): lambda: np.stack([Y, Y]),
    ("coefficient", "x"): lambda: 0.5,
    ("Events.of", "name"): lambda: "an-event",
    ("riemattn.solvers.core.events.Event", "spec"): lambda: None,
    ("TransformerLayer.continuous_field", "mask"): lambda: None,
    ("ButcherTableau", "b_hat"): lambda: None,
    ("ButcherTableau", "embedded_order"): lambda: None,
    ("GradientField", "weights"): lambda: None,
    ("to_pymanopt", "tokens"): lambda: 4,
    ("cluster_staircase", "weights"): lambda: np.array([1.0, 2.0, 1.0, 1.0]),
    ("normalised_energy", "n"): lambda: 5,
    # riemattn.testing (strategies are drawn once, checkers run on a correct field)
    ("attention_fields", "time_varying"): lambda: False,
    ("head_matrices", "h"): lambda: 2,
    ("symmetric_with_top_eigenvector", "dominant"): lambda: True,
    ("assert_forward_invariant", "slack"): lambda: 1e-9,
    ("inner_rounding", "manifold"): lambda: ra.Sphere(D - 1),
    ("inner_rounding", "a"): lambda: Y.copy(),
    ("inner_rounding", "b"): lambda: Y[::-1].copy(),
    ("check_order", "reference"): lambda: None,
    ("check_order", "t_span"): lambda: (0.0, 2.0),
    ("check_order", "steps"): lambda: (2, 4, 8, 16),
    ("check_riemannian_gradient", "cost"): lambda: (lambda y: float(np.sum(y[..., 0]))),
    ("check_riemannian_gradient", "gradient"): lambda: (
        lambda y: ra.Sphere(D - 1).to_tangent(np.broadcast_to(np.eye(D)[0], np.shape(y)), y)),
    ("check_riemannian_gradient", "metric"): lambda: None,
    ("hemisphere_points", "min_margin"): lambda: 1e-3,
    ("WeightedClusterField", "n"): lambda: 5,
    ("cluster_staircase", "theta0"): lambda: np.array([0.1, 0.7, 2.0, 3.0]),  # within one half-turn (documented)
}

#: Instances whose public methods are swept, where the constructor's valid call does not give a
#: useful one (keyed by the class's full name).
INSTANCES = {
    "riemattn.solvers.core._trajectory.Trajectory": lambda: ra.integrate(
        _field(), Y, (0.0, 0.1), "dopri5", dense_output=True),
    "riemattn.analysis.hessians.InteractionHessian": lambda: _hessian(),
    "riemattn.solvers.core.events.Events": lambda: _events_record(),
    "riemattn.analysis.meanfield.CircleDensity": lambda: _density(),
    "riemattn.geometry.ellipsoid.Ellipsoid": lambda: ra.Ellipsoid(np.eye(D)),
    "riemattn.geometry.metrics.EllipsoidMetric": lambda: ra.Ellipsoid(np.eye(D)).metric,
    "riemattn.geometry.metrics.SphereMetric": lambda: ra.Sphere(D - 1).metric,
    "riemattn.solvers.geodesics.InducedEllipsoidMetric": lambda: ra.Ellipsoid(np.eye(D), metric="euclidean").metric,
}


def _torch(value):
    import torch

    return torch.as_tensor(value)


def _critical_point():
    from riemattn.analysis.critical_points import certify

    return certify(Y, 1.0)


def _events_record():
    from riemattn.analysis.events import level

    event = level(lambda y: y[..., 0, 0], 0.9, name="an-event")
    return ra.integrate(_field(), Y, (0.0, 0.1), "rk4", dt=0.05, events=[event]).events


def _density():
    from riemattn.analysis.meanfield import CircleDensity

    return CircleDensity(1.0, sigma=0.1, N=16)


def _hessian():
    from riemattn.analysis.hessians import energy_hessian

    return energy_hessian(Y, 1.0)

CONSTRAINED = {"beta", "dt", "d", "n", "k", "dim", "tol", "rtol", "atol", "eps", "n_samples", "first_step",
               "max_steps"}

FREE_TEXT = {"name", "label", "ylabel", "label_prefix", "command", "quantity", "note"}

# densities on the N = 16 grid of analysis.meanfield (the uniform density 1 / (2 pi))
for _key in ("fourier_moments", "order_parameter", "CircleDensity.velocity", "CircleDensity.rhs",
             "CircleDensity.potential", "CircleDensity.transport"):
    VALID_AT[_key, "rho"] = lambda: np.full(16, 1 / (2 * np.pi))
VALID_AT["CircleDensity.solve", "rho0"] = lambda: np.full(16, 1 / (2 * np.pi))
VALID_AT["CircleDensity.stationary_state", "guess"] = lambda: np.full(16, 1 / (2 * np.pi))
VALID_AT["CircleDensity.solve", "t_span"] = lambda: (0.0, 0.1)

# issue 55's parts and diagnostics (rollout, leaders): valid examples
VALID_AT.update({
    ("AttentionField", "bias"): lambda: None,  # (a bias does not combine with the context below)
    ("AttentionField", "context"): lambda: np.ones((5, D)),
    ("Bias", "rule"): lambda: (lambda i, j: -np.abs(i - j) * 0.5),
    ("Bias", "name"): lambda: "a-bias",
    ("alibi", "slopes"): lambda: 0.5,
    ("as_bias", "bias"): lambda: np.zeros((4, 4)),
    ("Mask", "rule"): lambda: (lambda i, j: j <= i),
    ("Mask", "name"): lambda: "a-mask",
    ("Mask", "builtin"): lambda: None,
    ("Mask.array", "l"): lambda: 4,
    ("Bias.array", "l"): lambda: 4,
    ("as_mask", "mask"): lambda: np.tril(np.ones((4, 4), dtype=bool)),
    ("rollout", "attention"): lambda: np.full((3, 4, 4), 0.25),
    ("rollout", "tau"): lambda: 0.2,
    ("rollout_ode", "field"): lambda: ra.AttentionField(np.eye(D), W="flat"),
    ("rollout_ode", "solution"): lambda: ra.integrate(ra.AttentionField(np.eye(D), W="flat"), Y, (0.0, 0.2), "rk4",
                                                      dt=0.05, dense_output=True),
    ("rollout_ode", "t"): lambda: np.array([0.1, 0.2]),
    ("rollout_ode", "start"): lambda: 0.0,
    ("Populations", "sizes"): lambda: (Y.shape[-2] - 2, 2),
    ("Populations", "fields"): lambda: {(0, 0): ra.AttentionField(np.eye(D), mask="causal"),
                                        (0, 1): ra.AttentionField(np.eye(D)), (1, 1): ra.AttentionField(np.eye(D))},
})
INSTANCES.update({
    "riemattn.dynamics.biases.Bias": lambda: ra.biases.alibi(0.5),
    "riemattn.dynamics.masks.Mask": lambda: ra.masks.window(2),
})
