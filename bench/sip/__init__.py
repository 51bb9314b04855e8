"""The phone side: concurrent SIP calls, RTP pacing, Kamailio in front, call recording, answering machines."""
