"""Public Hypothesis strategies and property checkers (extra ``testing``)."""
