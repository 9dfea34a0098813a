"""The daemons' HTTP(S) serving, shared by nimbus's API and a supervisor's /metrics and
logviewer: the server (``server``), request heads and bodies (``head``, ``body``), the WSGI
side of a request (``wsgi``), its deadlines and bounds (``limits``), refusals counted and
logged within a bound (``refusals``), and TLS material read again when its files change
(``tls_material``)."""
