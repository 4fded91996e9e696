"""Real services for the tests and benchmarks: PostgreSQL, moto's S3 server over HTTP, an OTLP/HTTP receiver.

    services = Services(decide(os.environ), database_url_variable="TEAMSTORE_TEST_DATABASE_URL")
    server_url = services.url("postgres")
    s3_endpoint = services.url("aws")
    services.close()

Where they come from is chosen once per session (:mod:`.choice`): containers through testcontainers where a
Docker engine answers, the local binaries and in-process servers otherwise; ``TEAMSTORE_TEST_SERVICES``
(``auto``, ``docker``, ``local``) forces it. The OTLP receiver runs in this process in both modes.
:mod:`.fixtures` is the pytest plugin; when a service cannot start its tests are skipped with the reason,
except under ``TEAMSTORE_REQUIRE_SERVICES=1`` (CI), where they fail instead.
"""

from tests.services.choice import Choice, decide
from tests.services.common import ServicesError, ServiceUnavailable, free_port, require_or_skip
from tests.services.postgres_log import postgres_server_log, postgres_server_log_size
from tests.services.session import Services

__all__ = [
    "Choice",
    "ServiceUnavailable",
    "Services",
    "ServicesError",
    "decide",
    "free_port",
    "postgres_server_log",
    "postgres_server_log_size",
    "require_or_skip",
]
