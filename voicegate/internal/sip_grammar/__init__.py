"""SIP's grammar: tokens and quoting (`syntax`), SIP, SIPS and tel URIs and name-addr values (`uri`).

A foundation, not part of internal/sip: the settings check a registrar's URI with it when they load
(internal/config), and the SIP stack, which stands on the settings, parses and writes every header with it.
"""
