"""Where NXP's eIQ Neutron SDK comes from: NXP's eIQ repository, not PyPI."""

SDK_MODULE = "eiq_neutron_sdk"
SDK_PACKAGE = "eiq-neutron-sdk"
SDK_INDEX = "https://eiq.nxp.com/repository"
