"""hoplite.dask.plugin - the worker plugin that connects each Dask worker
to its host's store, and register() / worker_sockets() for the driver.
"""
import asyncio
import os

from .conn import NotConnected, _PluginBase, _connected_socket, _forget, use

#: the plugin's name on the workers (registering again replaces it)
PLUGIN_NAME = "hoplite"

class HopliteWorkerPlugin(_PluginBase):
    """A distributed WorkerPlugin that connects each worker to its host's
    store at worker setup and closes the connection at teardown. Tasks and
    hoplite.dask.scatter then use that connection (hoplite.dask.client()).

    The socket of a worker is the first of:
      sockets[worker name], sockets[str(worker name)], sockets[worker
      address], sockets[worker host]   (a dict; keys you did not give are
      skipped)
      socket                            (one path for every worker)
      $HOPLITE_SOCKET in the worker's environment
    A worker with none fails the registration with NotConnected naming it.
    timeout: the client's default timeout in seconds (None: $HOPLITE_TIMEOUT
    or 60)."""

    name = PLUGIN_NAME

    def __init__(self, socket=None, sockets=None, timeout=None):
        self.socket = os.fspath(socket) if socket is not None else None
        self.sockets = dict(sockets or {})
        self.timeout = timeout
        self._client = None

    def socket_for(self, name, address, env):
        """The socket a worker of this name and address uses (None: none)."""
        host = _address_host(address)
        for k in (name, str(name), address, host):
            if k is not None and k in self.sockets:
                return os.fspath(self.sockets[k])
        return self.socket or env.get("HOPLITE_SOCKET") or None

    def __getstate__(self):
        return {"socket": self.socket, "sockets": self.sockets, "timeout": self.timeout}

    def __setstate__(self, state):
        self.__init__(**state)

    async def setup(self, worker):
        sock = self.socket_for(worker.name, worker.address, os.environ)
        if not sock:
            raise NotConnected(
                "hoplite: no store socket for worker %r (%s): pass "
                "HopliteWorkerPlugin(socket=...) or sockets={name, address or host: socket}, "
                "or start the worker with HOPLITE_SOCKET set" % (worker.name, worker.address))
        loop = asyncio.get_running_loop()
        try:
            # connecting waits for the store's greeting: not on the event loop
            self._client = await loop.run_in_executor(None, use, sock, self.timeout)
        except Exception as e:
            raise NotConnected("hoplite: worker %r (%s) cannot connect to its store: %s"
                               % (worker.name, worker.address, e)) from None
        worker.hoplite = self._client

    def teardown(self, worker):
        c, self._client = self._client, None
        if c is not None:
            _forget(c)
        if getattr(worker, "hoplite", None) is c:
            worker.hoplite = None


def worker_sockets(dask_client):
    """{worker address: the store socket its hoplite client uses} (None
    where it has none), to check a deployment before relying on it."""
    return dask_client.run(_connected_socket)


def _address_host(address):
    try:
        from distributed.comm import get_address_host
        return get_address_host(address)
    except Exception:
        return None


def register(dask_client, socket=None, sockets=None, timeout=None):
    """Register HopliteWorkerPlugin(socket, sockets, timeout) with every
    current and future worker of `dask_client` (Client.register_worker_plugin
    in distributed 2022.12; register_plugin in newer versions). Raises
    NotConnected if a worker has no socket or cannot connect. Returns
    {worker address: socket it connected to}."""
    plugin = HopliteWorkerPlugin(socket, sockets, timeout)
    reg = getattr(dask_client, "register_worker_plugin", None)
    if reg is None:  # distributed >= 2023.9 spells it register_plugin
        dask_client.register_plugin(plugin, name=PLUGIN_NAME)
    else:
        reg(plugin, name=PLUGIN_NAME)
    return worker_sockets(dask_client)


