"""A strict in-memory Kubernetes API server for unit tests, served over real HTTP.

``FakeApiServer`` speaks the apiserver's REST API on loopback so the production client,
informers and leader election run unchanged against it; ``server.state`` is the in-process
handle for seeding and reading objects. ``FakeClock`` drives time-based code in tests.
The contract suite in ``tests/koordinator/kube`` runs the same tests against this fake
and a real kube-apiserver.
"""

from testsupport.fake.clock import FakeClock
from testsupport.fake.registry import ResourceType, SchemaValidatorFactory
from testsupport.fake.server import FakeApiServer, Fault, RequestRecord
from testsupport.fake.state import ClusterState
from testsupport.fake.status import Cause, StatusError

__all__ = [
    "Cause",
    "ClusterState",
    "FakeApiServer",
    "FakeClock",
    "Fault",
    "RequestRecord",
    "ResourceType",
    "SchemaValidatorFactory",
    "StatusError",
]
