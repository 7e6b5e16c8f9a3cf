"""Curves, tiers and plans of an input *by a method* (exact, sampled, distributed): plain values
in, the same typed results out, whichever the method. The CLI parses flags, calls one of these
once and renders what it returns."""

from .curve import CurveResult, TraceInput, curve_of
from .method import Distributed, Exact, Method, Sampled, method_of
from .tiers import TiersResult, tiers_of

__all__ = ["CurveResult", "Distributed", "Exact", "Method", "Sampled", "TiersResult", "TraceInput", "curve_of", "method_of", "tiers_of"]
