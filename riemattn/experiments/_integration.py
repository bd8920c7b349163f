"""Integration shared by the GLPR reproductions."""

from __future__ import annotations

from ..fields import VectorField
from ..integrate import integrate


def integrate_tangent(field, y0, t_save, config):
    """Adaptive integration of ``field`` with its tangent values as the drive.

    The projected steppers otherwise step with the attention's un-normalized update, whose radial
    part (~ e^beta / n for USA) inflates their error constants and the adaptive error estimate; the
    GLPR figures avoid that by wrapping the field. Uses ``config["stepper"]``, ``"rtol"``, ``"atol"``;
    saves at ``t_save`` (from 0 to ``t_save[-1]``).
    """
    return integrate(
        VectorField(field, field.manifold),
        y0,
        (0.0, float(t_save[-1])),
        stepper=config["stepper"],
        rtol=config["rtol"],
        atol=config["atol"],
        saveat=t_save,
    )
