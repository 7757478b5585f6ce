"""moto's S3 server with atomic conditional writes, for the object-store tests.

moto checks `If-None-Match: *` / `If-Match` and then writes, with no lock between the two, on
a threaded server: two concurrent conditional PUTs of one key can both succeed, which real
S3 (and GCS, Azure) never allow. Lance's commits and Lancet's leases rely on exactly that
guarantee, so the tests serialise moto's object writes; everything else is moto unchanged.

Usage: python moto_server.py -H 127.0.0.1 -p PORT
"""
import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

_writes = threading.RLock()


def _serialised(method):
    def run(self, *args, **kwargs):
        with _writes:
            return method(self, *args, **kwargs)

    return run


for name in ("put_object", "copy_object", "_key_response_post"):
    if hasattr(S3Response, name):
        setattr(S3Response, name, _serialised(getattr(S3Response, name)))

if __name__ == "__main__":
    main(sys.argv[1:])
