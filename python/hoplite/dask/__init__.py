"""hoplite.dask - hand large numpy arrays to Dask tasks through hoplite.

Drop-in for client.scatter: the one line that changes in user code is

    fut = client.scatter(weights, broadcast=True)        # before: Dask copies it
    fut = hoplite.dask.scatter(client, weights, broadcast=True)   # after: hoplite does

The result is an ordinary distributed.Future (or a list/dict of them, as
client.scatter returns); tasks that take it receive the array itself, so
task functions (`def f(a): return a.sum()`) stay as they are. The array is
put into this host's store once; every chosen worker gets it through its
own store (with broadcast=True every worker at once: a pipelined hoplite
broadcast) with get_async on its event loop, and is registered with the scheduler as
holding the key, so Dask has nothing to copy. Should Dask move the key
between workers anyway (a worker the scatter did not place it on, the
Active Memory Manager dropping replicas and re-creating them, a gather to
the client), it sends a few hundred bytes naming the hoplite object and the
receiver reads the array from hoplite (see _dumps/_loads below).

Every worker uses the hoplite store of its own host. Connect them with the
worker plugin, once per cluster:

    import hoplite.dask as hd
    hd.register(client)                          # socket from each worker's $HOPLITE_SOCKET
    hd.register(client, socket="/run/hoplite/store.sock")       # the same path everywhere
    hd.register(client, sockets={"host-a": "/a.sock", 0: "/b.sock"})   # per host/name

or start the workers with HOPLITE_SOCKET set (a LocalCluster takes
env={"HOPLITE_SOCKET": ...}); the driver uses $HOPLITE_SOCKET or use(socket).

Arrays tasks receive are read-only (zero-copy views of the store's shared
memory): copy one to modify it. The lower-level API is still here: put()
returns a small picklable ArrayRef, hoplite_task wraps task functions that
take and return refs.

    ref = hd.put(big_array)                        # on the driver or in a task
    futs = [client.submit(hd.hoplite_task(np.sum), ref, workers=[w]) for w in ws]

Objects made by put() stay in hoplite until deleted: hd.delete(refs) (or
ref.delete()). Objects made by scatter() are deleted when the futures it
returned are released (see scatter). A node may delete only what it made
(hoplite.NotAllowed otherwise, while the maker's store is up): a driver
that deletes refs its workers put needs the directory run with
--delete-any.

The package by concern: conn (this process's clients, ArrayRef, put, get,
delete, hoplite_task), arrays (HopliteArray and how Dask sends it),
plugin (the worker plugin, register), dropin (scatter, the drop-in). Workers read
scattered arrays and the driver puts them with the asyncio calls
(Client.get_async / put_async) on Dask's own event loops.
"""
# _connected_socket, _forget and _staged are imported for the tests
from .conn import (DEFAULT_MIN_BYTES, ArrayRef, NotConnected, _connected_socket,  # noqa: F401
                   _forget, client, delete, get, hoplite_task, put, use)
from .arrays import HopliteArray, stats
from .plugin import PLUGIN_NAME, HopliteWorkerPlugin, register, worker_sockets
from .dropin import _staged, scatter, wait_deletes  # noqa: F401

__all__ = ["DEFAULT_MIN_BYTES", "PLUGIN_NAME", "ArrayRef", "HopliteArray", "HopliteWorkerPlugin",
           "NotConnected", "client", "delete", "get", "hoplite_task", "put", "register",
           "scatter", "stats", "use", "wait_deletes", "worker_sockets"]
