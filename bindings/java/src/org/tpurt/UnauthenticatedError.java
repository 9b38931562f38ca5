package org.tpurt;

/** Status code 16 (TensorFlow's UnauthenticatedError). */
public class UnauthenticatedError extends OpError {
  public UnauthenticatedError(String message) {
    super(16, message);
  }
}
