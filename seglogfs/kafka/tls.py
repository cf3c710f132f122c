"""The listener's TLS: an :class:`ssl.SSLContext` (TLS 1.2 and later) from the PEM files of
``ssl.certfile``/``ssl.keyfile``/``ssl.cafile``, asking for client certificates per ``ssl.client.auth``."""

from __future__ import annotations

import ssl

from seglogfs.errors import ConfigError

from .listener_security import ListenerSecurity

__all__ = ["server_context"]

_VERIFY = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def server_context(security: ListenerSecurity) -> ssl.SSLContext:
    """The server context of ``security``; ConfigError naming the setting when a file cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(security.certfile or "", security.keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("kafka.ssl.certfile", security.certfile,
                          f"cannot load the certificate and key ({security.keyfile}): {exc}") from None
    if security.cafile is not None:
        try:
            context.load_verify_locations(cafile=security.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("kafka.ssl.cafile", security.cafile, f"cannot load the CAs: {exc}") from None
    context.verify_mode = _VERIFY[security.client_auth]
    return context
