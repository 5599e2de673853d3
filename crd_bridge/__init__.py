"""The CRD bridge: watches Package/DeploymentPolicy/Node objects and turns them into workflow starts and signals."""
