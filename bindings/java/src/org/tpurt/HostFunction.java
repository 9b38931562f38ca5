package org.tpurt;

import java.util.Map;

/** A host function for tpu.outside_compilation: positional and keyword arguments in, any value out. */
@FunctionalInterface
public interface HostFunction {
  Object apply(Object[] args, Map<String, Object> kwargs) throws Exception;
}
