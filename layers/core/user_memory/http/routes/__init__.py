"""The API's routes, one module and one Powertools `Router` per resource, joined in `http/app.py`.

A route declares `request: Request` and reaches the services through the resolver's context
(`http/context.py`), never through a closure: the routers are built once, at import.
"""
