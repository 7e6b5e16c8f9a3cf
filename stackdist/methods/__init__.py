"""Curves, tiers and plans of an input *by a method* (exact, sampled, distributed): plain values
in, the same typed results out, whichever the method. The CLI parses flags, calls one of these
once and renders what it returns."""

from .method import Distributed, Exact, Method, Sampled, method_of

__all__ = ["Distributed", "Exact", "Method", "Sampled", "method_of"]
