"""The demo: virtual nodes, the gateway and the operator Q&A on one machine; the self-test demo."""
