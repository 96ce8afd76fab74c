"""Who this peer is and how it reaches others.

  identity  RSA identity: libp2p peer id and DHT signing key in one
  dial      announced addresses: which to dial, at what rate
  pubsub    gossipsub through hivemind's p2pd: a daemon started with pubsub on, and a client to
            publish, subscribe and list a topic's peers over its control socket
  wire      the framing of our libp2p streams (bundle, notify, push, info; the weight and score streams reuse
            it): serving, fetching, pushing one frame
"""
