include "EventTensor/Dialect/EventTensor/EventTensor.td"
