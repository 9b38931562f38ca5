package org.tpurt;

/** Status code 7 (TensorFlow's PermissionDeniedError). */
public class PermissionDeniedError extends OpError {
  public PermissionDeniedError(String message) {
    super(7, message);
  }
}
