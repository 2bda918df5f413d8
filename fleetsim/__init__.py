"""fleetsim: a simulated GPU inference fleet for fleetmend's tests, drills and demo.

Never imported by production code. The parts, each in its own module:

    scenario     YAML scenario models (pydantic) and loading; scenarios/ has the bundled ones
    fleet        Fleet: builds and runs everything below from a scenario
    kube/        the Kubernetes API server, store and controllers (its own package)
    kubelet      runs each bound pod: image pull, weight load, probes, restarts
    engine       one vLLM engine: FIFO queue on a warming service curve, KV pressure
    replica      a replica's HTTP surface (/health, /v1/chat/completions, /metrics)
    vllm_metrics vLLM metric names per engine release
    dcgm         a DCGM-exporter-style /metrics per node (Xid, ECC)
    netserve     many loopback listeners served from one process
    router       the gateway: routing set, weights, shed tiers, retries, counters
    traffic      open-loop arrivals into the router
    actions      the external system actions land on, by operation id
    faults       fault injection and the alerts each fault fires
    control      HTTP control API of `python -m fleetsim serve`
    queueing     fluid queue, ramp reference (`simulate_ramp`), service curves
    contract     label, annotation, alert and header names shared with fleetmend
    clock        wall, scaled and manual time
"""
