"""An RSA private key in PEM, in pure Python, for the service-account signing key of a local
kube-apiserver (scheduler_hook.kube_local).

A test control plane needs one key and nothing else from a crypto library; CI machines may
have neither `openssl` nor `cryptography`, and the project does not depend on them. The key
protects nothing (loopback, thrown away with the test), so plain Miller-Rabin and PKCS#1 DER
are enough.
"""
from __future__ import annotations

import base64
import math
import random

_SMALL = [p for p in range(3, 2000, 2) if all(p % d for d in range(3, int(p ** 0.5) + 1, 2))]
_RNG = random.SystemRandom()


def _probable_prime(n: int, rounds: int = 24) -> bool:
    if any(n % p == 0 for p in _SMALL):
        return n in _SMALL
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for _ in range(rounds):
        x = pow(_RNG.randrange(2, n - 1), d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime(bits: int) -> int:
    while True:
        # top two bits set: the product of two such primes has exactly 2*bits bits
        n = _RNG.getrandbits(bits) | (3 << (bits - 2)) | 1
        if _probable_prime(n):
            return n


def _der_len(n: int) -> bytes:
    if n < 128:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _der_int(v: int) -> bytes:
    raw = v.to_bytes(v.bit_length() // 8 + 1, "big")  # +1 byte: keeps the sign bit clear
    raw = raw.lstrip(b"\0") or b"\0"
    if raw[0] & 0x80:
        raw = b"\0" + raw
    return b"\x02" + _der_len(len(raw)) + raw


def rsa_private_key_pem(bits: int = 2048) -> bytes:
    """A fresh PKCS#1 `RSA PRIVATE KEY` PEM block (what Go's keyutil reads)."""
    e = 65537
    while True:
        p, q = _prime(bits // 2), _prime(bits // 2)
        phi = (p - 1) * (q - 1)
        if p != q and math.gcd(e, phi) == 1:
            break
    n, d = p * q, pow(e, -1, phi)
    body = b"".join(_der_int(x) for x in (0, n, e, d, p, q, d % (p - 1), d % (q - 1),
                                          pow(q, -1, p)))
    der = b"\x30" + _der_len(len(body)) + body
    b64 = base64.b64encode(der)
    lines = b"\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
    return b"-----BEGIN RSA PRIVATE KEY-----\n" + lines + b"\n-----END RSA PRIVATE KEY-----\n"
