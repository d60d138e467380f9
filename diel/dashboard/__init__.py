"""``diel dashboard``: a live, read-only web page of a results database.

:func:`diel.dashboard.app.create_app` builds the Starlette application over an open
reader (:func:`diel.results.open`), behind a token (:mod:`diel.dashboard.access`);
:mod:`diel.dashboard.cli` serves it with uvicorn.
The page (``static/``) is plain JavaScript that reads the JSON endpoints and draws with
Plotly's JavaScript, served from the installed ``plotly`` package. See docs/dashboard.md.
The libraries are the ``dashboard`` extra (``pip install 'diel[dashboard]'``).
"""
