"""Who this peer is and how it reaches others.

  identity  RSA identity: libp2p peer id and DHT signing key in one
  dial      announced addresses: which to dial, at what rate
"""
