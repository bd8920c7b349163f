"""Analysis: what the theory says about the dynamics, and how to check it.

Diagnostics and Lyapunov functions (:mod:`riemattn.analysis.diagnostics`), hemispheres
(:mod:`riemattn.analysis.hemispheres`), closed-form predictions of the papers
(:mod:`riemattn.analysis.theory`), the gradient-flow structure (metric, potential, Riemannian
gradients: :mod:`riemattn.analysis.gradient_flow`, :mod:`riemattn.analysis.gradients`), Riemannian
Hessians of the energies (:mod:`riemattn.analysis.hessians`) and the search for their critical points
(:mod:`riemattn.analysis.critical_points`), the continuity equation on the circle
(:mod:`riemattn.analysis.meanfield`), and ready-made events of the theory for
``integrate(..., events=...)`` (:mod:`riemattn.analysis.events`: consensus, cluster merges,
hemispheres, energy and Lyapunov levels), and the low-temperature reduction of clusters to weighted
particles (:mod:`riemattn.analysis.weighted_clusters`).

May import: :mod:`riemattn.solvers`, :mod:`riemattn.dynamics`, :mod:`riemattn.geometry` and the
shared infrastructure.
"""
