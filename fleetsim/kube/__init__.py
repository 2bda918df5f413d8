"""fleetsim's Kubernetes: an object store, simulated controllers and an HTTP API server.

`store.Store` holds the objects with API-server semantics; `cluster.Cluster` wires the
store to the controllers (scheduler, ReplicaSets, Deployments, EndpointSlices, node
lifecycle, LeaderWorkerSets, pod termination, garbage collection); `server.KubeServer`
serves it all over HTTP for the official client and kubectl.

Built from scratch rather than on kmock's KubernetesEmulator: kmock (0.8) is an
aiohttp mock whose emulator stores objects as plain dicts with dict-merge updates
only; it has no label or field selectors, no resourceVersion conflicts, no strategic
merge or JSON patch, no Table output or discovery for kubectl, and no hook for
controllers to react to changes, which are the parts fleetsim needs most.
"""
