"""NXP eIQ Neutron: the Neutron converter adapter (``compiler``) and the payload it writes,
what ``NeutronBackend`` reads (``payload``)."""
