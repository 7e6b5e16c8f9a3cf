"""Renderers: the plan as a text table (:mod:`.table`) and PNG figures (:mod:`.plot`).

They read results; they compute nothing. matplotlib is imported only when a plot is drawn.
"""
