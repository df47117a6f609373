"""HTTP: serving a Floodgate process's endpoint, and calling one.

* :mod:`~pipeline.http.serving`: a FastAPI app served by uvicorn in a daemon thread (a
  query group's metrics and control endpoint, the admission and sweeper services);
* :mod:`~pipeline.http.gates`: the ASGI gates in front of every app (``Host``, bearer
  token, body limit);
* :mod:`~pipeline.http.control_file`: a query group's control file and the proof that
  the endpoint it names is the driver that wrote it;
* :mod:`~pipeline.http.client`: the command line's calls to those endpoints.

May import: pipeline.config, pipeline.metrics, pipeline.logs, pipeline.security,
pipeline.state, pipeline.errors.
"""
