"""fleetsim's Kubernetes: an object store, simulated controllers and an HTTP API server.

`store.Store` holds the objects with API-server semantics; `cluster.Cluster` wires the
store to the controllers (scheduler, ReplicaSets, Deployments, EndpointSlices, node
lifecycle, LeaderWorkerSets, pod termination, garbage collection); `server.KubeServer`
serves it all over HTTP for the official client and kubectl.
"""
