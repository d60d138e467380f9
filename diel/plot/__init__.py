"""Plots of a search: ``diel plot`` and the same figures from Python or a web page.

Three steps, each its own module, so a page can take the data as JSON or the Plotly
figure without going through files:

1. :func:`load_study` reads one study through the read-only reader
   (:func:`diel.results.open`);
2. :func:`figure_data` turns it into the plain data of one plot kind (:data:`KINDS`:
   history, parallel, importance, slice, curves, pareto, timeline);
3. :mod:`diel.plot.render_mpl` (PNG, SVG) or :mod:`diel.plot.render_plotly` (HTML, or a
   figure for a page) draws that data.

```python
import diel.results
from diel.plot import figure_data, load_study
from diel.plot.render_mpl import save

with diel.results.open("wf.db") as results:
    study = load_study(results, "wf", epochs=True)
save(figure_data(study, "curves"), "curves.png")
```

The libraries are the ``plot`` extra (``pip install 'diel[plot]'``); the renderers
raise :class:`MissingExtra` without them. Names load on first use, so that the
``diel`` command starts without importing SQLAlchemy.
"""

from diel.lazy import names_from

_HOMES = {"load_study": "_study", "Study": "_study", "Axis": "_study",
          "figure_data": "data", "KINDS": "data", "MissingExtra": "_extra"}

__all__ = list(_HOMES)
__getattr__ = names_from(__name__, _HOMES)
