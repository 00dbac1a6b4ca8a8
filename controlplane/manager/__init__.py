"""koord-manager: Koordinator's admission webhooks, served over self-managed TLS.

* :mod:`.webhooks` -- the webhook handlers (pods, ElasticQuotas, nodes, the
  slo-controller-config ConfigMap, Reservations), the AdmissionReview format and the
  dispatcher shared by the server and ``koord-manager admit``;
* :mod:`.certs` -- CA and serving certificate, the Secret, caBundle patching, rotation;
* :mod:`.server` -- the aiohttp webhook, health-probe and metrics servers;
* :mod:`.cache` -- the informer caches the webhooks read;
* :mod:`.manager` -- the process: start-up order, readiness, runnables (controllers join here);
* :mod:`.options`, :mod:`.admit`, ``__main__`` -- flags, the offline admission command, the CLI.

See ``docs/manager.md``.
"""
