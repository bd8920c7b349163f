"""Closing the LocalCluster riemattn made: no Dask shutdown chatter on the console (issue 34 item 8)."""

import logging

from riemattn.runs._cluster import close_quietly


class _Closing:
    """A stand-in client/cluster whose close logs what a closing nanny logs on a loaded machine."""

    def __init__(self):
        self.closed = False

    def close(self):
        logging.getLogger("distributed.nanny").warning("Worker process still alive after 4.0 seconds, killing")
        self.closed = True


def test_close_quietly_silences_shutdown_warnings_and_restores_levels(capsys):
    nanny = logging.getLogger("distributed.nanny")
    before = nanny.level
    handler = logging.StreamHandler()  # Dask's own console handler writes to stderr
    nanny.addHandler(handler)
    try:
        client, cluster = _Closing(), _Closing()
        close_quietly(client, cluster)
        assert client.closed and cluster.closed
        assert "still alive" not in capsys.readouterr().err
        assert nanny.level == before
        nanny.warning("a warning after the close")  # other warnings still reach the console
        assert "a warning after the close" in capsys.readouterr().err
    finally:
        nanny.removeHandler(handler)
