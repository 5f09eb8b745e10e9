"""Views of :class:`~lucky_monitor.core.session.MonitorSession` for machines without a screen.

``snapshot`` (a PNG of the image region), ``record`` (a video), ``export``
(Prometheus metrics of every live segment) and ``remote`` (the window inside a
password-protected VNC server on 127.0.0.1). None of them imports Qt or
``transport``: like the window and ``watch``, each reads Ticks and the
session's consistent copies, and writes nothing into a segment.
"""
